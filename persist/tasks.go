package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/tasks/taskstore"
)

// bucketTasks holds durable MCP task records (taskstore.Record), by task id.
// It is made by the first task written, so a store from before it opens
// unchanged (it is not one of topBuckets, which checkLayout requires).
var bucketTasks = []byte("tasks")

// TaskRecordVersion is the version of the task record this build writes
// and reads; a record of another version does not decode.
const TaskRecordVersion = 1

// taskRecord is a task's stored form: JSON with a version, times as Unix
// nanoseconds, durations in milliseconds.
type taskRecord struct {
	V             int                 `json:"v"`
	ID            string              `json:"id"`
	Principal     string              `json:"principal"`
	Tool          string              `json:"tool"`
	AgentID       string              `json:"agent_id"`
	MessageID     string              `json:"message_id,omitempty"`
	Status        string              `json:"status"`
	StatusMessage string              `json:"status_message,omitempty"`
	Created       int64               `json:"created"`
	Updated       int64               `json:"updated"`
	Settled       int64               `json:"settled,omitempty"`
	TTLMs         int64               `json:"ttl_ms"`
	Result        json.RawMessage     `json:"result,omitempty"`
	Error         *taskstore.RPCError `json:"error,omitempty"`
}

// EncodeTask is r's stored bytes.
func EncodeTask(r taskstore.Record) ([]byte, error) {
	w := taskRecord{V: TaskRecordVersion, ID: r.ID, Principal: r.Principal, Tool: r.Tool, AgentID: r.AgentID, MessageID: r.MessageID,
		Status: string(r.Status), StatusMessage: r.StatusMessage, Created: r.CreatedAt.UnixNano(), Updated: r.UpdatedAt.UnixNano(),
		TTLMs: r.TTL.Milliseconds(), Result: r.Result, Error: r.Error}
	if !r.SettledAt.IsZero() {
		w.Settled = r.SettledAt.UnixNano()
	}
	return json.Marshal(w)
}

// DecodeTask reads a stored task record. Bytes that are not a record of
// TaskRecordVersion, lack an id, principal or agent, carry an unknown
// status or a negative TTL, or hold a result that is not a JSON object are
// an error wrapping ErrCorrupt.
func DecodeTask(b []byte) (taskstore.Record, error) {
	var w taskRecord
	if err := json.Unmarshal(b, &w); err != nil {
		return taskstore.Record{}, fmt.Errorf("task record: %w: %w", seam.ErrCorrupt, err)
	}
	bad := func(why string) (taskstore.Record, error) {
		return taskstore.Record{}, fmt.Errorf("task record %q: %s: %w", w.ID, why, seam.ErrCorrupt)
	}
	switch {
	case w.V != TaskRecordVersion:
		return bad(fmt.Sprintf("version %d is not %d", w.V, TaskRecordVersion))
	case w.ID == "" || w.Principal == "" || w.AgentID == "":
		return bad("id, principal or agent missing")
	case w.TTLMs < 0:
		return bad("negative ttl")
	}
	st := taskstore.Status(w.Status)
	if st != taskstore.StatusWorking && !st.Terminal() {
		return bad(fmt.Sprintf("unknown status %q", w.Status))
	}
	if len(w.Result) > 0 {
		var obj map[string]json.RawMessage
		if json.Unmarshal(w.Result, &obj) != nil || obj == nil {
			return bad("result is not an object")
		}
	}
	r := taskstore.Record{ID: w.ID, Principal: w.Principal, Tool: w.Tool, AgentID: w.AgentID, MessageID: w.MessageID, Status: st,
		StatusMessage: w.StatusMessage, CreatedAt: time.Unix(0, w.Created).UTC(), UpdatedAt: time.Unix(0, w.Updated).UTC(),
		TTL: time.Duration(w.TTLMs) * time.Millisecond, Result: w.Result, Error: w.Error}
	if w.Settled != 0 {
		r.SettledAt = time.Unix(0, w.Settled).UTC()
	}
	return r, nil
}

var _ taskstore.Store = (*Store)(nil)

// PutTask creates or replaces a task record, committed when it returns.
func (s *Store) PutTask(ctx context.Context, r taskstore.Record) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b, err := EncodeTask(r)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		tb, err := tx.CreateBucketIfNotExists(bucketTasks)
		if err != nil {
			return err
		}
		return tb.Put([]byte(r.ID), b)
	})
}

// Task reads a task record: ErrNotFound (tasks') for an unknown id,
// ErrCorrupt for bytes that do not decode.
func (s *Store) Task(ctx context.Context, id string) (taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return taskstore.Record{}, err
	}
	var b []byte
	err := s.view(func(tx *bolt.Tx) error {
		if tb := tx.Bucket(bucketTasks); tb != nil {
			if v := tb.Get([]byte(id)); v != nil {
				b = append([]byte(nil), v...)
			}
		}
		return nil
	})
	if err != nil {
		return taskstore.Record{}, err
	}
	if b == nil {
		return taskstore.Record{}, fmt.Errorf("persist: task %q: %w", id, taskstore.ErrNotFound)
	}
	return DecodeTask(b)
}

// DeleteTask removes a task record; an unknown id is not an error.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		if tb := tx.Bucket(bucketTasks); tb != nil {
			return tb.Delete([]byte(id))
		}
		return nil
	})
}

// Tasks lists every task record. One that does not decode is skipped and
// logged: a lost task, never a store that cannot list the others.
func (s *Store) Tasks(ctx context.Context) ([]taskstore.Record, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	var out []taskstore.Record
	err := s.view(func(tx *bolt.Tx) error {
		tb := tx.Bucket(bucketTasks)
		if tb == nil {
			return nil
		}
		return tb.ForEach(func(k, v []byte) error {
			r, err := DecodeTask(v)
			if err != nil {
				s.log.Error("a task record does not decode; skipping it", "task", string(k), "err", err)
				return nil
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}
