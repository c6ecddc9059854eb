package spawn_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A child an older version stored with a cyclic output schema is not
// rebuilt on a follow-up after a restart: the send fails with
// NOT_RESUMABLE naming the cause, and the model, which would trigger the
// stack overflow with its first structured_output, is never called.
func TestAStoredCyclicSchemaFailsTheFollowupCleanly(t *testing.T) {
	var calls atomic.Int32
	fake := fakeopenai.New(func(int, fakeopenai.Request) fakeopenai.Reply {
		calls.Add(1)
		return fakeopenai.Reply{Text: "ok"}
	})
	t.Cleanup(fake.Close)
	store := memstore.New()
	hdr := seam.Header{ID: manager.NewID(), Parent: seam.PrincipalAddress("local"), Principal: "local",
		Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable, Provider: "spawn", Label: "old", Cwd: t.TempDir(),
		CreatedAt: time.Now()}
	desc := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn",
		Label: "old", OutputSchema: json.RawMessage(`{"type":"object","$ref":"#"}`)}
	if err := store.WriteChild(context.Background(), hdr.ID, seam.ChildWrite{Create: &seam.NewChild{Header: hdr, Descriptor: desc}}); err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{Store: store})
	if err := m.Register(spawn.New(spawn.Options{Client: openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k"}), Model: "m"})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	caller := seam.ParentRef{Principal: "local", Cwd: hdr.Cwd}
	_, err := m.Followup(context.Background(), caller, hdr.ID, "go on", true)
	var me *seam.Error
	if !errors.As(err, &me) || me.Code != seam.CodeNotResumable {
		t.Fatalf("Followup = %v, want NOT_RESUMABLE", err)
	}
	if cause := errors.Unwrap(me); cause == nil || !strings.Contains(cause.Error(), "applies itself to the same value forever") {
		t.Errorf("the refusal's cause = %v, want the schema loop", cause)
	}
	if !strings.Contains(me.Error(), "output_schema") || !strings.Contains(me.Error(), "applies itself to the same value forever") {
		t.Errorf("the refusal the model reads = %q, want it to name the schema loop", me.Error())
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the model was called %d times for a child that cannot be rebuilt", n)
	}
}
