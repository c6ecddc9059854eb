package manager

import (
	"context"

	"github.com/mcp-subagent/mcp-subagent/manager/authority"
	"github.com/mcp-subagent/mcp-subagent/manager/questions"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/worktree"
)

// The manager's side of the policy packages: what they ask of it (their
// Host interfaces, implemented by policyHost) and the exported calls that
// reach them through the manager (Prune, Retain, RemoveWorktree, Answer).

// policyHost is the Manager as the policies' Host, kept apart so the
// Host methods do not widen the Manager's own surface.
type policyHost struct{ m *Manager }

// resident reports whether child id is resident here.
func (m *Manager) resident(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.live[id]
	return ok
}

func (h policyHost) Resident(id string) bool { return h.m.resident(id) }

// Remove deletes a pruned root's subtree (retention.Host), serialised with
// cold resumes: a resume either claims the child first (the store then
// refuses the delete) or finds it gone. Then what is kept of the removed
// children outside the store goes: their corrupt marks, their worktrees,
// and what Options.Removed removes.
func (h policyHost) Remove(ctx context.Context, root string, subtree []string) ([]string, bool, error) {
	m := h.m
	m.resumeMu.Lock()
	if m.resident(root) {
		m.resumeMu.Unlock()
		return nil, true, nil
	}
	trees := worktrees.Of(ctx, m.store, subtree)
	removed, err := m.store.Delete(ctx, root)
	m.resumeMu.Unlock()
	if err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	for _, id := range removed {
		delete(m.corrupt, id)
	}
	m.mu.Unlock()
	m.wt.DropPruned(ctx, trees)
	if m.opts.Removed != nil {
		m.opts.Removed(removed)
	}
	return removed, false, nil
}

// commitTurn commits the turn's changes in the child's worktree, if it has
// one, and adds them to res (worktrees.Keeper.Commit).
func (m *Manager) commitTurn(hdr seam.Header, res seam.Result) seam.Result {
	ctx, cancel := m.bg()
	defer cancel()
	return m.wt.Commit(ctx, hdr, res)
}

// settleWorktree removes a settled child's unchanged worktree.
func (m *Manager) settleWorktree(hdr seam.Header) {
	ctx, cancel := m.bg()
	defer cancel()
	m.wt.Settle(ctx, hdr)
}

// dropWorktree removes the worktree of a child whose start failed.
func (m *Manager) dropWorktree(id string, w *seam.Worktree) {
	ctx, cancel := m.bg()
	defer cancel()
	m.wt.Drop(ctx, id, w)
}

// Prune removes the principals' settled root children whose last activity
// is before req.Before, each with its whole subtree (package retention).
// Without a store it is CONTROL_UNAVAILABLE.
func (m *Manager) Prune(ctx context.Context, req retention.Request) (retention.Result, error) {
	if m.store == nil {
		return retention.Result{DryRun: req.DryRun, Pruned: []retention.Pruned{}},
			newErr(seam.CodeControlUnavailable, "pruning needs the session store; this server runs without one")
	}
	return retention.Pruner{Store: m.store, Host: policyHost{m}, Log: m.log}.Prune(ctx, req)
}

// Retain starts retention (retention.Run) until Close. It returns at once;
// call it after Recover. A second call, or one with r.OlderThan unset,
// does nothing.
func (m *Manager) Retain(r retention.Policy) {
	if r.OlderThan <= 0 || m.store == nil {
		return
	}
	m.mu.Lock()
	if m.closed || m.retaining {
		m.mu.Unlock()
		return
	}
	m.retaining = true
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		retention.Run(m.ctx, r, m.Prune, m.log)
	}()
}

// RemoveWorktree removes a stopped child's worktree and its branch,
// changes and all (`mcp-subagent worktree rm`, asked of the daemon), for
// the child's root principal calling as a root caller. A resident child's
// is refused: it may be working there. The check and the removal are
// serialised with cold resumes, so no message wakes the child in a
// worktree being removed; a later one recreates it from the recorded base.
func (m *Manager) RemoveWorktree(ctx context.Context, caller seam.ParentRef, id string) (seam.Worktree, error) {
	if m.store == nil {
		return seam.Worktree{}, newErr(seam.CodePersistenceUnavailable, "removing a worktree needs the session store; none is configured")
	}
	hdr, err := m.header(ctx, id)
	if err != nil {
		return seam.Worktree{}, err
	}
	if err := authority.RemoveWorktree(caller, hdr); err != nil {
		return seam.Worktree{}, err
	}
	if hdr.Worktree == nil {
		return seam.Worktree{}, newErr(seam.CodeInvalidRequest, "subagent %s has no worktree", id)
	}
	m.resumeMu.Lock()
	defer m.resumeMu.Unlock()
	if m.resident(id) {
		return seam.Worktree{}, newErr(seam.CodeInvalidRequest, "subagent %s is resident; interrupt it and wait until it is ready before removing its worktree", id)
	}
	if err := worktree.Remove(ctx, worktree.Info(*hdr.Worktree)); err != nil {
		return seam.Worktree{}, err
	}
	return *hdr.Worktree, nil
}

// Put stores a question (questions.Host).
func (h policyHost) Put(q seam.Question) error {
	m := h.m
	ctx, cancel := m.bg()
	defer cancel()
	err := m.storeWrite(ctx, func(ctx context.Context) error { return m.store.PutQuestion(ctx, q) })
	switch {
	case err == nil:
	case q.Answer == nil:
		m.log.Error("storing a child's question failed; the policy answers it", "agent_id", q.ChildID, "err", err)
	default:
		m.log.Error("storing the answer to a child's question failed", "agent_id", q.ChildID, "question", q.ID, "err", err)
	}
	return err
}

// Notify delivers a question's notice to the asking child's parent
// (questions.Host).
func (h policyHost) Notify(hdr seam.Header, n seam.Notice) error {
	m := h.m
	err := m.deliver(hdr, n)
	if err != nil {
		m.log.Error("the notice of a child's question could not be stored; it still lists", "agent_id", hdr.ID, "err", err)
	}
	return err
}

// Answered wakes the parent's waiters: the child's listing changed
// (questions.Host).
func (h policyHost) Answered(hdr seam.Header) { h.m.signalAddr(hdr.Parent) }

// asker is the AskFunc of hdr's child; nil without a store (a question
// that cannot be stored is never asked).
func (m *Manager) asker(hdr seam.Header) seam.AskFunc {
	if m.store == nil {
		return nil
	}
	return func(ctx context.Context, r seam.AskRequest) seam.Question { return m.questions.Ask(ctx, hdr, r) }
}

// Answer answers a child's question for caller: questionID names it, or,
// empty, the one question childID waits on. It returns the question with
// its answer; nil and no error when questionID is empty and the child
// waits on no question (the message is then an ordinary send). Whoever
// may send to the child may answer (authority.Answer); what text may say is the
// questions package's.
func (m *Manager) Answer(ctx context.Context, caller seam.ParentRef, childID, questionID, text string) (*seam.Question, error) {
	return m.AnswerVia(ctx, caller, childID, questionID, text, "")
}

// AnswerVia is Answer for an answer that came another way than a tool
// call (seam.ViaWebView), recorded with it (seam.Answer.Via).
func (m *Manager) AnswerVia(ctx context.Context, caller seam.ParentRef, childID, questionID, text, via string) (*seam.Question, error) {
	return m.settle(ctx, caller, childID, questionID, func(p *questions.Pending) (seam.Question, error) {
		return m.questions.AnswerVia(p, text, via)
	})
}

// Decline settles a child's question as the person declined it (a
// client's elicitation declined or cancelled): an approval is denied, a
// question gets no answer. Who may is as for Answer.
func (m *Manager) Decline(ctx context.Context, caller seam.ParentRef, childID, questionID string) (*seam.Question, error) {
	return m.settle(ctx, caller, childID, questionID, m.questions.Decline)
}

// OfferQuestions has a waiting call take childID's questions before they
// become notices (questions.Board.Offer).
func (m *Manager) OfferQuestions(childID string) (<-chan seam.Question, func()) {
	return m.questions.Offer(childID)
}

// NoticeQuestion sends the notice of a question an offer could not put to
// the person; nothing when it no longer waits.
func (m *Manager) NoticeQuestion(questionID string) { m.questions.Notice(questionID) }

// settle gives the question Answer finds the answer of
// (questions.Board.Settle): whoever may send to the child may, and how a
// settled one was settled is told only to one who may answer the child.
func (m *Manager) settle(ctx context.Context, caller seam.ParentRef, childID, questionID string, of func(*questions.Pending) (seam.Question, error)) (*seam.Question, error) {
	may := func(h seam.Header) error { return authority.Answer(caller, h) }
	return m.questions.Settle(childID, questionID, may, func() []seam.Question {
		if childID == "" || m.store == nil {
			return nil
		}
		if hdr, err := m.header(ctx, childID); err != nil || may(hdr) != nil {
			return nil
		}
		stored, _ := m.store.Questions(ctx, childID)
		return stored
	}, of)
}
