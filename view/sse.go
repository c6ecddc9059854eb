package view

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// events writes server-sent events: "event: NAME\ndata: JSON\n\n" (JSON
// never holds a raw newline, so one data line carries it).
type events struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func startEvents(w http.ResponseWriter) events {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	e := events{w: w, rc: http.NewResponseController(w)}
	_ = e.rc.Flush()
	return e
}

// writeWithin bounds each write: a browser that stops reading ends its
// stream instead of holding Close up.
const writeWithin = 10 * time.Second

func (e events) send(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeWithin))
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// ping is a comment line: it keeps an idle stream open through proxies and
// tells the server early that the browser went away.
func (e events) ping() error {
	_ = e.rc.SetWriteDeadline(time.Now().Add(writeWithin))
	if _, err := fmt.Fprint(e.w, ": ping\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}

// Row is one child as the tree stream sends it: a listing row with its
// free text clipped so a tree of thousands stays small.
type Row struct {
	Kind           string      `json:"kind"` // child or diagnostic
	ID             string      `json:"id"`
	Label          string      `json:"label,omitempty"`
	Status         string      `json:"status,omitempty"`
	Provider       string      `json:"provider,omitempty"`
	Model          string      `json:"model,omitempty"`
	Parent         string      `json:"parent,omitempty"`
	Depth          int         `json:"depth,omitempty"`
	CreatedAt      time.Time   `json:"created_at,omitzero"`
	Usage          *seam.Usage `json:"usage,omitempty"`
	TreeUsage      *seam.Usage `json:"tree_usage,omitempty"`
	LastStopReason string      `json:"last_stop_reason,omitempty"`
	LastMessage    string      `json:"last_message,omitempty"`
	Reason         string      `json:"reason,omitempty"` // a diagnostic row's: corrupt, unavailable
	// Questions are what a child asks the person (status input_required);
	// the page shows them with a way to answer (api/answer).
	Questions []Question `json:"questions,omitempty"`
}

// Question is a question a child waits on, its text clipped.
type Question struct {
	ID      string   `json:"id"`
	Kind    string   `json:"kind"` // approval or question
	Text    string   `json:"text"`
	Choices []string `json:"choices,omitempty"`
}

func viewRow(r manager.Row) Row {
	return Row{Kind: r.Kind, ID: truncate.Bound(r.ID, 200), Label: truncate.Bound(r.Label, 200), Status: r.Status,
		Provider: r.Provider, Model: truncate.Bound(r.Model, 200), Parent: truncate.Bound(r.Parent, 200), Depth: r.Depth,
		CreatedAt: r.CreatedAt, Usage: r.Usage, TreeUsage: r.TreeUsage, LastStopReason: string(r.LastStopReason),
		LastMessage: truncate.Bound(r.LastMessage, 300), Reason: r.Reason, Questions: viewQuestions(r.Questions)}
}

func viewQuestions(qs []manager.PendingQuestion) []Question {
	var out []Question
	for _, q := range qs {
		out = append(out, Question{ID: q.ID, Kind: q.Kind, Text: truncate.Bound(q.Text, 2000), Choices: q.Choices})
	}
	return out
}

// Snapshot is the tree stream's first event ("snapshot"): the rows in
// creation order (parents before their children), the newest MaxRows at
// most, and how many older ones the tree holds besides.
type Snapshot struct {
	Rows    []Row `json:"rows"`
	Total   int   `json:"total"`
	Omitted int   `json:"omitted,omitempty"`
}

// Change is a later event ("change"): the rows that are new or differ
// from what was sent, and the ids no longer in the tree.
type Change struct {
	Upsert  []Row    `json:"upsert,omitempty"`
	Remove  []string `json:"remove,omitempty"`
	Total   int      `json:"total"`
	Omitted int      `json:"omitted,omitempty"`
}

// tree streams the caller's tree: a snapshot, then changes, from the
// principal's shared feed (feed.go).
func (s *Server) tree(w http.ResponseWriter, r *http.Request, caller seam.ParentRef) {
	if !s.stream() {
		writeError(w, http.StatusServiceUnavailable, "the web view is closing")
		return
	}
	defer s.streams.Done()
	if !s.admit(w, caller.Principal) {
		return
	}
	defer s.release(caller.Principal)
	ctx := r.Context()
	states, st, leave := s.join(caller)
	defer leave()
	if st == nil || st.err != nil { // the feed's first listing is under way (or failed before this stream)
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case st = <-states:
		}
	}
	if st.err != nil {
		writeManagerError(w, st.err)
		return
	}
	ev := startEvents(w)
	sent := make(map[string]string, len(st.rows)) // id -> the row's JSON as last sent (shared with the feed)
	snap := Snapshot{Rows: st.rows, Total: st.total, Omitted: st.total - len(st.rows)}
	for i, vr := range st.rows {
		sent[vr.ID] = st.js[i]
	}
	if ev.send("snapshot", snap) != nil {
		return
	}
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-beat.C:
			if ev.ping() != nil {
				return
			}
			continue
		case st = <-states:
		}
		if st.err != nil {
			continue
		}
		ch := Change{Total: st.total, Omitted: st.total - len(st.rows)}
		seen := make(map[string]bool, len(st.rows))
		for i, vr := range st.rows {
			seen[vr.ID] = true
			if sent[vr.ID] != st.js[i] {
				sent[vr.ID] = st.js[i]
				ch.Upsert = append(ch.Upsert, vr)
			}
		}
		for id := range sent {
			if !seen[id] {
				delete(sent, id)
				ch.Remove = append(ch.Remove, id)
			}
		}
		if len(ch.Upsert) == 0 && len(ch.Remove) == 0 {
			continue
		}
		if ev.send("change", ch) != nil {
			return
		}
	}
}

// anyResident reports whether a row is of a resident child: running,
// queued, idle or asking, whose turns end with no lifecycle event.
func anyResident(rows []manager.Row) bool {
	for _, r := range rows {
		if r.Status == manager.StatusRunning || r.Status == manager.StatusQueued || r.Status == manager.StatusIdle || r.Status == manager.StatusInputRequired {
			return true
		}
	}
	return false
}

// await waits for a wake-up (a or b, or tick: ticked), pinging the
// stream on each heartbeat meanwhile; ok is false when the stream must end
// (the request is gone, the view closes, or a ping fails). A nil channel
// never wakes it.
func (s *Server) await(ctx context.Context, ev events, beat *time.Ticker, a, b <-chan struct{}, tick <-chan time.Time) (ticked, ok bool) {
	for {
		select {
		case <-ctx.Done():
			return false, false
		case <-s.done:
			return false, false
		case <-beat.C:
			if ev.ping() != nil {
				return false, false
			}
		case <-a:
			return false, true
		case <-b:
			return false, true
		case <-tick:
			return true, true
		}
	}
}

// bound keeps the newest MaxRows rows of a tree in creation order: in a
// live view the children being worked on matter, and they are the newest
// (a kept child whose parent is older shows at the top level).
func (s *Server) bound(rows []manager.Row) ([]manager.Row, int) {
	return rows[max(len(rows)-s.opts.MaxRows, 0):], len(rows)
}

// TranscriptHead is the transcript stream's first event ("transcript"):
// who the child is, its status, and its latest entries (Omitted earlier
// ones are left out).
type TranscriptHead struct {
	manager.Transcript
	Omitted int64 `json:"omitted,omitempty"`
}

// TranscriptMore is a later event ("entries"): what came since, and the
// child's status now.
type TranscriptMore struct {
	Status  string                    `json:"status"`
	Len     int64                     `json:"len"`
	Entries []manager.TranscriptEntry `json:"entries"`
}

// transcript streams one child's transcript, live while it runs.
func (s *Server) transcript(w http.ResponseWriter, r *http.Request, caller seam.ParentRef) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeError(w, http.StatusBadRequest, `INVALID_REQUEST: field "id": required; give the child's id`)
		return
	}
	if !s.stream() {
		writeError(w, http.StatusServiceUnavailable, "the web view is closing")
		return
	}
	defer s.streams.Done()
	if !s.admit(w, caller.Principal) {
		return
	}
	defer s.release(caller.Principal)
	ctx := r.Context()
	// Watch first, then read: whatever is journaled after the read is
	// signalled.
	watch, err := s.src.Watch(ctx, caller, id)
	if err != nil {
		writeManagerError(w, err)
		return
	}
	defer watch.Stop()
	t, err := s.src.Transcript(ctx, caller, id, 0)
	if err != nil {
		writeManagerError(w, err)
		return
	}
	ev := startEvents(w)
	head := TranscriptHead{Transcript: t}
	if n := int64(len(t.Entries)); n > int64(s.opts.MaxEntries) {
		head.Omitted = n - int64(s.opts.MaxEntries)
		head.Entries = t.Entries[head.Omitted:]
	}
	if ev.send("transcript", head) != nil {
		return
	}
	after, status := t.Len, t.Status
	beat := time.NewTicker(s.opts.Heartbeat)
	defer beat.Stop()
	for {
		if _, ok := s.await(ctx, ev, beat, watch.C, watch.Settled, nil); !ok {
			return
		}
		more, err := s.src.Transcript(ctx, caller, id, after)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("web view: reading a transcript failed", "agent_id", id, "err", err)
			continue
		}
		if len(more.Entries) == 0 && more.Status == status {
			continue
		}
		after, status = more.Len, more.Status
		if ev.send("entries", TranscriptMore{Status: more.Status, Len: more.Len, Entries: more.Entries}) != nil {
			return
		}
	}
}
