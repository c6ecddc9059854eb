package persist

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// bulkCreate loads children many per transaction (one fsync per batch) so a
// benchmark's setup does not take 10,000 fsyncs. Test-only: the store's own
// CreateChild commits each child on its own.
func bulkCreate(b *testing.B, s *Store, hs []seam.Header, d seam.Descriptor) {
	b.Helper()
	db, err := json.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	const perTx = 1000
	for start := 0; start < len(hs); start += perTx {
		batch := hs[start:min(start+perTx, len(hs))]
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, h := range batch {
				if err := validateNew(h, d); err != nil {
					return err
				}
				hb, err := json.Marshal(h)
				if err != nil {
					return err
				}
				if err := putChild(tx, h, hb, db); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchEvents returns n events shaped like a real journal: turns of a user
// prompt, an assistant tool call, its result and an answer with usage.
func benchEvents(from, n int) []agent.Event {
	text := strings.Repeat("Read the parser and list what breaks on empty input. ", 4)
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	out := make([]agent.Event, 0, n)
	for seq := from; len(out) < n; seq++ {
		turn := seq/6 + 1
		e := agent.Event{Seq: int64(seq), Time: at.Add(time.Duration(seq) * time.Millisecond), Turn: turn}
		switch seq % 6 {
		case 0:
			e.Kind = agent.EventTurnStart
		case 1:
			e.Kind, e.Source = agent.EventMessage, agent.SourceUser
			e.Message = &seam.Message{Role: seam.RoleUser, Content: text}
		case 2:
			e.Kind = agent.EventMessage
			e.Message = &seam.Message{Role: seam.RoleAssistant, ToolCalls: []seam.ToolCall{
				{ID: fmt.Sprintf("call_%d", seq), Name: "read_file", Arguments: `{"path":"parser/parse.go"}`}}}
			e.Usage = &seam.Usage{InputTokens: 1800, OutputTokens: 24}
		case 3:
			e.Kind = agent.EventMessage
			e.Message = &seam.Message{Role: seam.RoleTool, ToolCallID: fmt.Sprintf("call_%d", seq-1), Content: text}
		case 4:
			e.Kind = agent.EventMessage
			e.Message = &seam.Message{Role: seam.RoleAssistant, Content: text}
			e.Usage = &seam.Usage{InputTokens: 2100, OutputTokens: 180}
		case 5:
			e.Kind, e.StopReason = agent.EventTurnEnd, agent.StopCompleted
		}
		out = append(out, e)
	}
	return out
}

func BenchmarkListings10k(b *testing.B) {
	s := openTest(b, b.TempDir())
	const n = 10_000
	parent := seam.PrincipalAddress("local")
	hs := make([]seam.Header, n)
	for i := range hs {
		hs[i] = testHeader(fmt.Sprintf("child-%05d", i), parent, time.Duration(i)*time.Millisecond)
	}
	bulkCreate(b, s, hs, testDescriptor())
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.Listings(ctx, parent, seam.Page{})
		if err != nil || len(got) != n {
			b.Fatalf("Listings = %d rows, %v", len(got), err)
		}
	}
}

func BenchmarkEvents10k(b *testing.B) {
	s := openTest(b, b.TempDir())
	const n = 10_000
	if err := createChild(s, testHeader("c", "p", 0), testDescriptor()); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < n; from += 1000 {
		if err := appendTo(s, "c", benchEvents(from, 1000)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		events, err := s.Events(ctx, "c")
		if err != nil || len(events) != n {
			b.Fatalf("Events = %d events, %v", len(events), err)
		}
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	s := openTest(b, b.TempDir())
	if err := createChild(s, testHeader("c", "p", 0), testDescriptor()); err != nil {
		b.Fatal(err)
	}
	// Building one event costs microseconds; the commit's fsync dominates.
	seq := 0
	b.ReportAllocs()
	for b.Loop() {
		if err := appendTo(s, "c", benchEvents(seq, 1)); err != nil {
			b.Fatal(err)
		}
		seq++
	}
}
