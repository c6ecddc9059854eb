package taskstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// RecordVersion is the version of the task record this build writes
// and reads; a record of another version does not decode.
const RecordVersion = 1

// storedRecord is a task's stored form: JSON with a version, times as Unix
// nanoseconds, durations in milliseconds.
type storedRecord struct {
	V             int             `json:"v"`
	ID            string          `json:"id"`
	Principal     string          `json:"principal"`
	Tool          string          `json:"tool"`
	AgentID       string          `json:"agent_id"`
	MessageID     string          `json:"message_id,omitempty"`
	Status        string          `json:"status"`
	StatusMessage string          `json:"status_message,omitempty"`
	Created       int64           `json:"created"`
	Updated       int64           `json:"updated"`
	Settled       int64           `json:"settled,omitempty"`
	TTLMs         int64           `json:"ttl_ms"`
	Result        json.RawMessage `json:"result,omitempty"`
	Error         *RPCError       `json:"error,omitempty"`
	Runner        string          `json:"runner,omitempty"`
	Beat          int64           `json:"beat,omitempty"`
	// Absent in records written before cross-instance cancels: false.
	CancelRequested bool `json:"cancel_requested,omitempty"`
}

// Encode is r's stored bytes, the same in every backend (persist's bbolt
// file, pgstore's tasks table), so a record reads alike in each.
func Encode(r Record) ([]byte, error) {
	w := storedRecord{V: RecordVersion, ID: r.ID, Principal: r.Principal, Tool: r.Tool, AgentID: r.AgentID, MessageID: r.MessageID,
		Status: string(r.Status), StatusMessage: r.StatusMessage, Created: r.CreatedAt.UnixNano(), Updated: r.UpdatedAt.UnixNano(),
		TTLMs: r.TTL.Milliseconds(), Result: r.Result, Error: r.Error, Runner: r.Runner, CancelRequested: r.CancelRequested}
	if !r.SettledAt.IsZero() {
		w.Settled = r.SettledAt.UnixNano()
	}
	if !r.Beat.IsZero() {
		w.Beat = r.Beat.UnixNano()
	}
	return json.Marshal(w)
}

// Decode reads a stored task record. Bytes that are not a record of
// RecordVersion, lack an id, principal or agent, carry an unknown
// status or a negative TTL, or hold a result that is not a JSON object are
// an error wrapping seam.ErrCorrupt.
func Decode(b []byte) (Record, error) {
	var w storedRecord
	if err := json.Unmarshal(b, &w); err != nil {
		return Record{}, fmt.Errorf("task record: %w: %w", seam.ErrCorrupt, err)
	}
	bad := func(why string) (Record, error) {
		return Record{}, fmt.Errorf("task record %q: %s: %w", w.ID, why, seam.ErrCorrupt)
	}
	switch {
	case w.V != RecordVersion:
		return bad(fmt.Sprintf("version %d is not %d", w.V, RecordVersion))
	case w.ID == "" || w.Principal == "" || w.AgentID == "":
		return bad("id, principal or agent missing")
	case w.TTLMs < 0:
		return bad("negative ttl")
	}
	st := Status(w.Status)
	if st != StatusWorking && !st.Terminal() {
		return bad(fmt.Sprintf("unknown status %q", w.Status))
	}
	if len(w.Result) > 0 {
		var obj map[string]json.RawMessage
		if json.Unmarshal(w.Result, &obj) != nil || obj == nil {
			return bad("result is not an object")
		}
	}
	r := Record{ID: w.ID, Principal: w.Principal, Tool: w.Tool, AgentID: w.AgentID, MessageID: w.MessageID, Status: st,
		StatusMessage: w.StatusMessage, CreatedAt: time.Unix(0, w.Created).UTC(), UpdatedAt: time.Unix(0, w.Updated).UTC(),
		TTL: time.Duration(w.TTLMs) * time.Millisecond, Result: w.Result, Error: w.Error, Runner: w.Runner,
		CancelRequested: w.CancelRequested}
	if w.Settled != 0 {
		r.SettledAt = time.Unix(0, w.Settled).UTC()
	}
	if w.Beat != 0 {
		r.Beat = time.Unix(0, w.Beat).UTC()
	}
	return r, nil
}

// Apply is the step of Store.UpdateTask that every backend shares, run
// inside its transaction: cur is the stored bytes of task id, fn's record
// is checked to keep id, and its bytes are returned for the store to
// write. fn's error is returned as it is.
func Apply(id string, cur []byte, fn func(Record) (Record, error)) (Record, []byte, error) {
	r, err := Decode(cur)
	if err != nil {
		return Record{}, nil, err
	}
	if r, err = fn(r); err != nil {
		return Record{}, nil, err
	}
	if r.ID != id {
		return Record{}, nil, fmt.Errorf("task %q: an update may not change the record's id (to %q)", id, r.ID)
	}
	b, err := Encode(r)
	if err != nil {
		return Record{}, nil, err
	}
	return r, b, nil
}
