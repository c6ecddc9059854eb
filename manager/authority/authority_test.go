package authority

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// headers is a Store of stored headers; err, when set, is every read's.
type headers struct {
	byID map[string]seam.Header
	err  error
}

func (s headers) Header(_ context.Context, id string) (seam.Header, error) {
	if s.err != nil {
		return seam.Header{}, s.err
	}
	h, ok := s.byID[id]
	if !ok {
		return seam.Header{}, seam.ErrNotFound
	}
	return h, nil
}

// The tree: principal p's root child g, its child pa, its child t; s a
// sibling of pa.
var (
	g     = seam.Header{ID: "g", Parent: seam.PrincipalAddress("p"), Principal: "p"}
	pa    = seam.Header{ID: "pa", Parent: "g", Principal: "p"}
	tgt   = seam.Header{ID: "t", Parent: "pa", Principal: "p"}
	store = headers{byID: map[string]seam.Header{"g": g, "pa": pa, "t": tgt, "s": {ID: "s", Parent: "g", Principal: "p"}}}
)

func agentRef(id string) seam.ParentRef { return seam.ParentRef{Principal: "p", AgentID: id} }

func chainOf(ids ...string) Chain {
	return func(yield func(string) bool) {
		for _, id := range ids {
			if !yield(id) {
				return
			}
		}
	}
}

func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	var se *seam.Error
	if !errors.As(err, &se) || se.Code != seam.CodeUnauthorized || !strings.Contains(se.Message, want) {
		t.Errorf("%s = %v, want UNAUTHORIZED saying %q", what, err, want)
	}
}

func allowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s = %v, want allowed", what, err)
	}
}

func TestSendAndAnswerOnlyByTheDirectParent(t *testing.T) {
	root := seam.ParentRef{Principal: "p"}
	allowed(t, "Send by parent", Send(agentRef("pa"), tgt))
	allowed(t, "Answer by parent", Answer(agentRef("pa"), tgt))
	allowed(t, "Send by root caller to a root child", Send(root, g))
	for name, c := range map[string]seam.ParentRef{
		"grandparent": agentRef("g"), "root caller": root, "itself": agentRef("t"),
		"another principal's agent": {Principal: "q", AgentID: "pa"},
	} {
		refused(t, "Send by "+name, Send(c, tgt), "you may send only to your direct children")
		refused(t, "Answer by "+name, Answer(c, tgt), "you may answer only your direct children's questions")
	}
}

func TestInterruptAndReadByAnyAncestor(t *testing.T) {
	ctx := context.Background()
	for _, c := range []seam.ParentRef{{Principal: "p"}, agentRef("pa"), agentRef("g")} {
		allowed(t, "Interrupt by "+c.Address(), Interrupt(ctx, store, c, tgt, nil))
		allowed(t, "Read by "+c.Address(), Read(ctx, store, c, tgt, nil))
	}
	refused(t, "Interrupt by itself", Interrupt(ctx, store, agentRef("t"), tgt, nil), "an agent cannot interrupt itself")
	refused(t, "Read by itself", Read(ctx, store, agentRef("t"), tgt, nil), "you may read only your own descendants' transcripts")
	for _, c := range []seam.ParentRef{agentRef("s"), {Principal: "q"}, {Principal: "q", AgentID: "g"}} {
		refused(t, "Interrupt by "+c.Address(), Interrupt(ctx, store, c, tgt, nil), "you may interrupt only your own descendants")
		refused(t, "Read by "+c.Address(), Read(ctx, store, c, tgt, nil), "you may read only your own descendants' transcripts")
	}
}

func TestTheLiveChainAnswersWithoutTheStore(t *testing.T) {
	ctx := context.Background()
	// No store: only the live chain can show g above t.
	allowed(t, "Interrupt by a live grandparent", Interrupt(ctx, nil, agentRef("g"), tgt, chainOf("pa", "g")))
	refused(t, "Interrupt by a grandparent, no chain, no store", Interrupt(ctx, nil, agentRef("g"), tgt, nil), "you may interrupt only your own descendants")
	refused(t, "Read by one not on the chain", Read(ctx, nil, agentRef("s"), tgt, chainOf("pa", "g")), "you may read only your own descendants' transcripts")
}

func TestAStoreThatCannotSayIsNotARefusal(t *testing.T) {
	broken := headers{err: errors.New("database down")}
	err := Interrupt(context.Background(), broken, agentRef("g"), tgt, nil)
	var se *seam.Error
	if !errors.As(err, &se) || se.Code != seam.CodePersistenceUnavailable || se.AgentID != "t" {
		t.Fatalf("Interrupt with a failing store = %v, want PERSISTENCE_UNAVAILABLE for t", err)
	}
	// A parent the store no longer holds ends the walk: refused.
	gone := headers{byID: map[string]seam.Header{"t": tgt}}
	refused(t, "Read past a missing parent", Read(context.Background(), gone, agentRef("g"), tgt, nil), "you may read only your own descendants' transcripts")
}

func TestReportOnlyByAResidentChild(t *testing.T) {
	allowed(t, "Report by a resident child", Report(agentRef("t"), &tgt))
	const want = "only a running continuable subagent may report"
	refused(t, "Report by a child not resident", Report(agentRef("t"), nil), want)
	refused(t, "Report by a root caller", Report(seam.ParentRef{Principal: "p"}, &tgt), want)
	refused(t, "Report under another principal", Report(seam.ParentRef{Principal: "q", AgentID: "t"}, &tgt), want)
}

func TestRemoveWorktreeOnlyByTheRootPrincipal(t *testing.T) {
	allowed(t, "RemoveWorktree by the root caller", RemoveWorktree(seam.ParentRef{Principal: "p"}, tgt))
	const want = "you may remove only your own principal's subagents' worktrees"
	refused(t, "RemoveWorktree by an agent", RemoveWorktree(agentRef("g"), tgt), want)
	refused(t, "RemoveWorktree by another principal", RemoveWorktree(seam.ParentRef{Principal: "q"}, tgt), want)
	refused(t, "RemoveWorktree with no principal", RemoveWorktree(seam.ParentRef{}, seam.Header{ID: "x"}), want)
}
