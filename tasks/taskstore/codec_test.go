package taskstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// Task records come from disk: any bytes decode or are refused as
// corrupt, never a panic, and what decodes re-encodes to a record that
// decodes the same.
func FuzzDecode(f *testing.F) {
	for _, r := range []Record{{ID: "task-1", Principal: "alice", Tool: "subagent", AgentID: "agent-1", MessageID: "msg-1",
		Status: StatusCompleted, StatusMessage: "answered", CreatedAt: t0, UpdatedAt: t0.Add(time.Second),
		SettledAt: t0.Add(2 * time.Second), TTL: time.Hour,
		Result: json.RawMessage(`{"content":[{"type":"text","text":"done"}],"isError":false}`)}, {ID: "task-2", Principal: "local", AgentID: "agent-2", Status: StatusWorking, CreatedAt: t0, UpdatedAt: t0}} {
		b, err := Encode(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":2,"id":"task-x","principal":"p","agent_id":"a","status":"working"}`))
	f.Add([]byte(`{"v":1,"id":"task-x","principal":"p","agent_id":"a","status":"done"}`))
	f.Add([]byte(`{"v":1,"id":"task-x","principal":"p","agent_id":"a","status":"completed","result":[1]}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			if !errors.Is(err, seam.ErrCorrupt) {
				t.Fatalf("a refusal that is not ErrCorrupt: %v", err)
			}
			return
		}
		again, err := Encode(r)
		if err != nil {
			t.Fatalf("accepted %q but cannot re-encode it: %v", b, err)
		}
		r2, err := Decode(again)
		if err != nil {
			t.Fatalf("accepted %q; its re-encoding %q does not decode: %v", b, again, err)
		}
		if third, _ := Encode(r2); !bytes.Equal(third, again) {
			t.Fatalf("accepted %q; it re-encodes as %q, then as %q", b, again, third)
		}
	})
}

// A task's runner and beat (several instances on one store) survive the
// stored form; a record written before they existed reads without them.
func TestRunnerAndBeatRoundTrip(t *testing.T) {
	r := Record{ID: "task-1", Principal: "alice", Tool: "send_message", AgentID: "agent-1", Status: StatusWorking,
		CreatedAt: t0, UpdatedAt: t0, TTL: time.Hour, Runner: "host-1-ab", Beat: t0.Add(10 * time.Second)}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got.Runner != r.Runner || !got.Beat.Equal(r.Beat) {
		t.Fatalf("decoded %+v, %v; want runner %q, beat %v", got, err, r.Runner, r.Beat)
	}
	old, err := Decode([]byte(`{"v":1,"id":"task-x","principal":"p","agent_id":"a","status":"working","created":1,"updated":1,"ttl_ms":1000}`))
	if err != nil || old.Runner != "" || !old.Beat.IsZero() {
		t.Fatalf("an older record decoded as %+v, %v; want no runner and no beat", old, err)
	}
}

// A cancel requested at another instance than the runner survives the
// stored form; a record written before the field existed reads without it.
func TestCancelRequestedRoundTrip(t *testing.T) {
	r := Record{ID: "task-1", Principal: "alice", Tool: "subagent", AgentID: "agent-1", Status: StatusWorking,
		CreatedAt: t0, UpdatedAt: t0, TTL: time.Hour, Runner: "host-1-ab", Beat: t0, CancelRequested: true}
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); err != nil || !got.CancelRequested {
		t.Fatalf("decoded %+v, %v; want the cancel request kept", got, err)
	}
	old, err := Decode([]byte(`{"v":1,"id":"task-x","principal":"p","agent_id":"a","status":"working","created":1,"updated":1,"ttl_ms":1000,"runner":"i1","beat":1}`))
	if err != nil || old.CancelRequested {
		t.Fatalf("an older record decoded as %+v, %v; want no cancel request", old, err)
	}
}
