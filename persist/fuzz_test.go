package persist

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Each fuzz target checks that its decoder never panics and that whatever it
// accepts is a fixed point after one re-encoding: encode(decode(b)) decodes
// again and encodes to the same bytes. (The first encoding may differ from b:
// whitespace, key order, time zones written as offsets.)

func roundTrip[T any](t *testing.T, b []byte, decode func([]byte) (T, error)) {
	v, err := decode(b)
	if err != nil {
		return
	}
	e1, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %q but cannot re-encode it: %v", b, err)
	}
	v2, err := decode(e1)
	if err != nil {
		t.Fatalf("accepted %q but refuses its re-encoding %q: %v", b, e1, err)
	}
	e2, err := json.Marshal(v2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(e1, e2) {
		t.Fatalf("re-encoding is not stable:\n%s\n%s", e1, e2)
	}
}

func seedJSON(f *testing.F, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

func FuzzDecodeEvent(f *testing.F) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("", -7*3600))
	seedJSON(f, agent.Event{Seq: 0, Kind: agent.EventTurnStart, Time: at, Turn: 1})
	seedJSON(f, agent.Event{Seq: 2, Kind: agent.EventMessage, Time: at, Turn: 1,
		Message: &seam.Message{Role: seam.RoleAssistant, ToolCalls: []seam.ToolCall{{ID: "c", Name: "read_file", Arguments: `{"path":"x"}`}}},
		Usage:   &seam.Usage{InputTokens: 5, OutputTokens: 1}})
	seedJSON(f, agent.Event{Seq: 3, Kind: agent.EventTurnEnd, Time: at, StopReason: agent.StopAborted, Diagnostic: "cancelled"})
	for _, s := range []string{``, `null`, `{}`, `{"kind":"x"}`, `{"seq":-1,"kind":"message"}`, `{"kind":"m"} {}`,
		`{"kind":"m","time":"not a time"}`, `{"kind":"m","message":null,"usage":{}}`, "{\"kind\":\"\xff\"}", `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, decodeEvent) })
}

func FuzzDecodeHeader(f *testing.F) {
	seedJSON(f, seam.Header{ID: "c1", Parent: "principal:local", Principal: "local", Depth: 1, DepthCap: 3,
		Mode: seam.ModeContinuable, Provider: "spawn", Label: "x", Cwd: "/w",
		CreatedAt: time.Date(1969, 12, 31, 23, 59, 59, 999, time.UTC), SeedLen: 8})
	for _, s := range []string{``, `null`, `{}`, `{"id":""}`, `{"id":"a","created_at":"2025-13-01T00:00:00Z"}`,
		`{"id":"a","depth":1e400}`, `{"id":"a","extra":true}`, `{"id":"a"}garbage`, `"string"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, decodeHeader) })
}

func FuzzDecodeDescriptor(f *testing.F) {
	seedJSON(f, seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable,
		Provider: "codex", Label: "x", Model: "m", Persona: "p",
		ToolFilter:   &seam.ToolFilter{Allow: []string{"a"}},
		OutputSchema: json.RawMessage(`{"type":"object"}`), Session: "thread"})
	for _, s := range []string{``, `null`, `{}`, `{"version":1}`, `{"version":2}`, `{"version":1,"unknown":0}`,
		`{"version":1,"output_schema": [ 1 , 2 ] }`, `{"version":1,"tool_filter":{"allow":null,"deny":[]}}`,
		`{"version":1,"tool_filter":{"both":1}}`, `{"version":1} {"version":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { roundTrip(t, b, decodeDescriptor) })
}

func TestDecodersRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    string
		dec  func([]byte) error
	}{
		{"an event that is null", `null`, func(b []byte) error { _, err := decodeEvent(b); return err }},
		{"an event without a kind", `{"seq":0}`, func(b []byte) error { _, err := decodeEvent(b); return err }},
		{"an event with trailing data", `{"seq":0,"kind":"message"} x`, func(b []byte) error { _, err := decodeEvent(b); return err }},
		{"a header without an id", `{"parent":"p"}`, func(b []byte) error { _, err := decodeHeader(b); return err }},
		{"a descriptor of an unknown version", `{"version":2}`, func(b []byte) error { _, err := decodeDescriptor(b); return err }},
		{"a descriptor with an unknown field", `{"version":1,"x":1}`, func(b []byte) error { _, err := decodeDescriptor(b); return err }},
		{"a descriptor with an unknown nested field", `{"version":1,"tool_filter":{"only":["a"]}}`, func(b []byte) error { _, err := decodeDescriptor(b); return err }},
	} {
		if err := tc.dec([]byte(tc.b)); err == nil {
			t.Errorf("accepted %s: %s", tc.name, tc.b)
		}
	}
}

// TestSeedCorpusSaysWhatItHolds keeps the committed seed corpus honest: a
// file named valid-* must be accepted by its decoder, refused-* refused.
func TestSeedCorpusSaysWhatItHolds(t *testing.T) {
	decoders := map[string]func([]byte) error{
		"FuzzDecodeEvent":      func(b []byte) error { _, err := decodeEvent(b); return err },
		"FuzzDecodeHeader":     func(b []byte) error { _, err := decodeHeader(b); return err },
		"FuzzDecodeDescriptor": func(b []byte) error { _, err := decodeDescriptor(b); return err },
	}
	for name, dec := range decoders {
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", name, "*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no seed corpus for %s: %v", name, err)
		}
		for _, file := range files {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
				!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
				t.Fatalf("%s is not a one-value go test fuzz v1 file", file)
			}
			b, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			base := filepath.Base(file)
			switch err := dec([]byte(b)); {
			case strings.HasPrefix(base, "valid-") && err != nil:
				t.Errorf("%s is refused: %v", file, err)
			case strings.HasPrefix(base, "refused-") && err == nil:
				t.Errorf("%s is accepted", file)
			}
		}
	}
}
