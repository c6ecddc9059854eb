package persist

import (
	"errors"
	"reflect"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// TestJournalRecordsALaterBuildWroteAreNotCorrupt: a stored record of a
// kind or version this build does not know reads as agent.EventUnknown in
// its place, so the journal still opens and stays valid; bytes that are no
// record at all are still corrupt.
func TestJournalRecordsALaterBuildWroteAreNotCorrupt(t *testing.T) {
	raw := [][]byte{
		[]byte(`{"seq":0,"kind":"turn/start","time":"2025-06-01T12:00:00Z","turn":1}`),
		[]byte(`{"seq":1,"kind":"reasoning","time":"2025-06-01T12:00:00Z","turn":1,"text":"hm"}`),
		[]byte(`{"v":2,"seq":2,"kind":"message","time":"2025-06-01T12:00:00Z","parts":[{"text":"x"}]}`),
		[]byte(`{"seq":3,"kind":"turn/end","time":"2025-06-01T12:00:00Z","turn":1,"stop_reason":"completed"}`),
	}
	events, err := decodeEvents("c", raw, 0)
	if err != nil {
		t.Fatalf("decodeEvents: %v", err)
	}
	want := []agent.Event{
		{Seq: 0, Kind: agent.EventTurnStart, Time: t0, Turn: 1},
		{Seq: 1, Kind: agent.EventUnknown, Time: t0},
		{Seq: 2, Kind: agent.EventUnknown, Time: t0},
		{Seq: 3, Kind: agent.EventTurnEnd, Time: t0, Turn: 1, StopReason: agent.StopCompleted},
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("decodeEvents =\n%+v\nwant\n%+v", events, want)
	}
	if err := agent.Validate(events); err != nil {
		t.Fatalf("the journal is invalid: %v", err)
	}

	for _, bad := range []string{"\x00\xff{not json", `{"seq":1,"kind":"message","time":"yesterday"}`, `{"seq":1}`} {
		damaged := append([][]byte(nil), raw...)
		damaged[1] = []byte(bad)
		if _, err := decodeEvents("c", damaged, 0); !errors.Is(err, seam.ErrCorrupt) {
			t.Errorf("decodeEvents over %q = %v, want ErrCorrupt", bad, err)
		}
	}
}
