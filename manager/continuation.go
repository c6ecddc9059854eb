package manager

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/persister"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Started is what StartContinuable hands back: plain data and the first
// turn, so a caller's test can build one.
type Started struct {
	ChildID   string
	MessageID string
	// Turn is the first turn. Its outcome comes in band only when the start
	// asked to wait; otherwise Wait reports ok false at once.
	Turn Turn
}

// Wait waits for the first turn's outcome (see Turn.Wait).
func (s *Started) Wait(ctx context.Context) (seam.Result, bool) { return s.Turn.Wait(ctx) }

// Committed reports whether the child's writes still stand (see
// Turn.Committed).
func (s *Started) Committed() error { return s.Turn.Committed() }

// Turn is a turn a caller handed a message id to, whose outcome it may
// wait for.
type Turn interface {
	// Wait returns the turn's outcome if the caller registered to wait for
	// it, ok false when ctx ends first (the child goes on, and its outcome
	// reaches the parent as the settlement notice) or when nobody waits.
	// An outcome is handed over only once the turn's journal is committed.
	Wait(ctx context.Context) (seam.Result, bool)
	// Committed reports whether everything the child wrote up to the
	// message's admission is committed and its writer has not failed
	// since: a failed writer stops the child, and the caller then gets the
	// error rather than a handle to it.
	Committed() error
}

// turn is the manager's Turn.
type turn struct {
	m        *Manager
	childID  string
	waiter   *waiter
	persist  *persister.Writer
	ticket   int64  // the writes that make the ids durable
	progress func() // stops the turn's progress notes; nil: none
}

// Wait stops the progress notes when it returns: they belong to the
// request that waits.
func (t *turn) Wait(ctx context.Context) (seam.Result, bool) {
	if t.progress != nil {
		defer t.progress()
	}
	return t.m.waitTurn(ctx, t.childID, t.waiter)
}

func (t *turn) Committed() error {
	if err := t.persist.Committed(); err != nil {
		return err
	}
	return t.persist.WaitFor(t.ticket)
}

// StartContinuable starts a continuable child and submits its first
// prompt. It returns once the child's record and the prompt are committed
// to the store, and the child starts its first turn only then: no turn,
// tool call or grandchild ever runs under an id that was not handed out.
// A failure returns no id and leaves nothing running (a commit that fails
// stops the child before it did anything). wait registers the caller to
// receive the first turn's outcome in band (see Started.Wait).
//
// A waited start on a GatedDriver returns at once and its turn starts at
// once: the record lingers to share the turn's commit, its tool rounds
// wait for it, and the caller hands the id on only with the outcome, after
// Committed. A commit that fails then ends the turn before any side
// effect, and the caller gets the error from Committed and no id.
//
// With req.Progress set, the first note is "started <id>", sent once the
// record is committed.
func (m *Manager) StartContinuable(ctx context.Context, name string, req seam.StartRequest, wait bool) (*Started, error) {
	p, err := m.validate(name, &req)
	if err != nil {
		return nil, err
	}
	if _, ok := p.(seam.Continuable); !ok {
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name,
			Message: fmt.Sprintf("provider %q cannot run continuable (background) children; run it in the foreground", name)}
	}
	if m.store == nil {
		return nil, newErr(seam.CodePersistenceUnavailable, "continuable children need a session store; none is configured")
	}
	req.ID = NewID()
	c, err := m.build(ctx, p, name, req, seam.ModeContinuable)
	if err != nil {
		return nil, err
	}
	hdr, desc, drv := c.hdr, c.desc, c.drv
	grant := m.budgets.Grant(req.Budget)
	m.budgets.Open(hdr.ID, hdr.Parent, grant)
	// The record (and the seed) is committed by the child's writer, ahead of
	// its journal.
	create := &seam.NewChild{Header: hdr, Descriptor: desc}
	a, err := m.activate(ctx, hdr, desc, drv, req.Parent.AgentID, create, nil, 0)
	if err != nil {
		_ = drv.Close()
		m.budgets.Close(hdr.ID)
		m.dropWorktree(hdr.ID, hdr.Worktree)
		return nil, err
	}
	stopProgress := func() {}
	if req.Progress != nil {
		var note func(string)
		note, stopProgress = agent.TurnProgress(drv.Journal(), req.Progress)
		a.persist.OnCreated(func() { note("started " + hdr.ID) })
	}
	a.deferred = wait && c.gated
	if a.deferred {
		a.persist.DeferRecord()
		c.gate.DeferTo(func() error { return a.persist.WaitFor(a.gate) })
	}
	// The grant rides with the stored prompt too, so a crash before the
	// first turn's budget event is stored reruns the prompt under it.
	msgID, w, _, _ := a.admitBudget(req.Prompt, agent.SourceUser, wait, &grant)
	m.lendTo(w, req.Parent, hdr.ID, msgID)
	a.gate = a.persist.Mark() // the record, the seed and the first message
	go a.run()
	// The ids go to the caller only once committed; the run waits for the
	// same commit before its first turn, so this costs the caller nothing
	// the turn would not have waited for.
	if !a.deferred {
		if err := a.persist.WaitFor(a.gate); err != nil {
			stopProgress()
			<-a.released // the run saw the failure and left nothing behind
			return nil, err
		}
	}
	return &Started{ChildID: hdr.ID, MessageID: msgID,
		Turn: &turn{m: m, childID: hdr.ID, waiter: w, persist: a.persist, ticket: a.gate, progress: stopProgress}}, nil
}

func startErr(ctx context.Context, provider string, err error) error {
	if ctx.Err() != nil {
		return &seam.Error{Code: seam.CodeCancelled, Provider: provider, Message: "the start was cancelled", Err: err}
	}
	var e *seam.Error
	if errors.As(err, &e) {
		return err
	}
	return &seam.Error{Code: seam.CodeInvalidRequest, Provider: provider, Message: err.Error(), Err: err}
}

// activate makes a child resident: registers it, records its ownership by
// the live parent agent (if any), claims it in the store for this manager
// and wires the journal to the store. The caller admits the first message,
// then calls start: an activation started with an empty inbox would settle
// at once.
// create is a new child's record, committed by its writer first with the
// claim; nil for a resumed child, which is claimed here instead, in one
// write with closing, the events that end a turn a crash left open, on
// the condition that the journal still holds the read events it was
// rebuilt from (ErrStale otherwise). ctx is the caller's: a resume's claim
// is part of its materialisation.
func (m *Manager) activate(ctx context.Context, hdr seam.Header, desc seam.Descriptor, drv seam.Driver, parentID string, create *seam.NewChild, closing []agent.Event, read int64) (*activation, error) {
	a := &activation{m: m, hdr: hdr, desc: desc, driver: drv, wake: make(chan struct{}),
		owned: map[string]*activation{}, waiters: map[string]*waiter{}, seen: map[string]bool{}, released: make(chan struct{}), isNew: create != nil}
	var fence *seam.Fence
	if create == nil {
		if cp, ok, _ := m.store.Checkpoint(ctx, hdr.ID); ok {
			a.usage = cp.Usage
		}
		lease := m.lease()
		if err := m.storeWrite(ctx, func(ctx context.Context) error {
			return m.store.WriteChild(ctx, hdr.ID, seam.ChildWrite{JournalIs: &read, Claim: &lease, Events: closing})
		}); err != nil {
			return nil, claimErr(ctx, hdr.ID, err)
		}
		// The claim's epoch fences every write of this activation.
		var err error
		if fence, err = m.fenceOf(ctx, hdr.ID); err != nil {
			return nil, claimErr(ctx, hdr.ID, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, newErr(seam.CodeDraining, "the server is shutting down; no new subagents start")
	}
	if _, dup := m.live[hdr.ID]; dup {
		return nil, newErr(seam.CodeInvalidRequest, "subagent %s is already resident", hdr.ID)
	}
	var claim *seam.Owner
	if create != nil {
		lease := m.lease()
		claim = &lease
	}
	a.persist = persister.New(persister.Config{Store: m.store, Ctx: context.WithoutCancel(m.ctx), Timeout: storeTimeout, ID: hdr.ID, Owner: m.owner,
		Log: m.log, Retry: m.retry, Create: create, Claim: claim, Fence: fence, OnFail: a.persistFailed})
	if create != nil {
		// A fork's seed is already in the journal: it goes out with the record.
		for _, e := range drv.Journal().Events() {
			a.persist.Add(e)
		}
	}
	a.unsubscribe = drv.Journal().Subscribe(a.persist.Add)
	a.ctx = m.ctx
	if parentID != "" {
		if pa := m.live[parentID]; pa != nil {
			pa.mu.Lock()
			if !pa.settling {
				pa.owned[hdr.ID] = a
				a.parent = pa
			}
			pa.mu.Unlock()
		}
	}
	m.live[hdr.ID] = a
	m.wg.Add(1)
	m.startRenewer()
	return a, nil
}

// fenceOf reads back the claim this manager was just granted: its epoch is
// what the child's writes are conditional on. A claim already someone
// else's (our lease ran out in between and another server took it) is
// ErrOwned.
func (m *Manager) fenceOf(ctx context.Context, id string) (*seam.Fence, error) {
	c, ok, err := m.store.ClaimOf(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ok || c.Owner.ID != m.owner {
		return nil, fmt.Errorf("the claim just granted is now held by %q: %w", c.Owner.ID, seam.ErrOwned)
	}
	return &seam.Fence{Owner: m.owner, Epoch: c.Epoch}, nil
}

// claimErr is the error of a resume whose claim was not granted.
func claimErr(ctx context.Context, id string, err error) error {
	switch {
	case errors.Is(err, seam.ErrOwned):
		return &seam.Error{Code: seam.CodeNotResumable, AgentID: id, Err: err,
			Message: fmt.Sprintf("subagent %s is resident in another server sharing this session store (%v); send it there, or again once that server has stopped", id, err)}
	case ctx.Err() != nil:
		return &seam.Error{Code: seam.CodeCancelled, AgentID: id, Message: "the send was cancelled", Err: err}
	case errors.Is(err, seam.ErrNotFound):
		return &seam.Error{Code: seam.CodeNotResumable, AgentID: id, Err: err, Message: fmt.Sprintf("subagent %q is unavailable", id)}
	}
	return &seam.Error{Code: seam.CodePersistenceUnavailable, AgentID: id, Err: fmt.Errorf("%w: %w", errClaimStore, err),
		Message: fmt.Sprintf("the session store failed while claiming subagent %s for this server (%v); nothing was sent, send again", id, err)}
}

// waitTurn waits for the outcome of the turn that handles w's message. An
// outcome is handed over only once the turn's journal is committed; one
// whose commit failed comes back as a failure saying so, never as the
// success the store does not hold.
func (m *Manager) waitTurn(ctx context.Context, childID string, w *waiter) (seam.Result, bool) {
	if w == nil {
		return seam.Result{}, false
	}
	defer w.loan.End(m.adm) // the caller waits no more
	select {
	case o := <-w.ch:
		return w.committed(o), true
	case <-ctx.Done():
	}
	// Give up the wait; if the outcome arrived meanwhile, take it.
	m.mu.Lock()
	a := m.live[childID]
	m.mu.Unlock()
	if a != nil {
		a.mu.Lock()
		for id, x := range a.waiters {
			if x == w {
				delete(a.waiters, id)
			}
		}
		a.mu.Unlock()
	}
	select {
	case o := <-w.ch:
		return w.committed(o), true
	default:
		return seam.Result{}, false
	}
}

// Route says how a follow-up reached its child.
type Route string

const (
	RouteQueued  Route = "queued"  // behind the turn in flight
	RouteWoken   Route = "woken"   // the idle resident child took it at once
	RouteResumed Route = "resumed" // the child was rebuilt from the store
)

// Sent is what Followup hands back: plain data and the turn that handles
// the message.
type Sent struct {
	MessageID string
	Route     Route
	ChildID   string
	Turn      Turn
}

// Wait waits for the outcome of the turn that handles the message (see
// Turn.Wait).
func (s *Sent) Wait(ctx context.Context) (seam.Result, bool) { return s.Turn.Wait(ctx) }

// Followup sends a message to a continuable child; only its exact direct
// parent may. The child runs it as a turn: behind the current one if it is
// running, at once if it is resident and idle, or after a cold resume from
// the store. The caller's ctx governs only lookup and admission: a race
// with another instance sharing the store (the child settling, claimed or
// run elsewhere right then) makes the send wait and try again within it
// (manager/pacing), never refuses it.
func (m *Manager) Followup(ctx context.Context, caller seam.ParentRef, childID, content string, wait bool) (*Sent, error) {
	return m.FollowupBudget(ctx, caller, childID, content, wait, nil)
}

// FollowupBudget is Followup granting the child a new budget (nil: it
// keeps what it has left) from the message's turn on; the grant is capped
// by the deployment and by what the child's ancestors have left when that
// turn starts.
func (m *Manager) FollowupBudget(ctx context.Context, caller seam.ParentRef, childID, content string, wait bool, budget *seam.Budget) (*Sent, error) {
	return m.followup(ctx, caller, childID, content, wait, wait, budget)
}

// FollowupAwaited is FollowupBudget without a wait, for a caller that
// waits on the turn after the send returns (AwaitSent: a durable MCP
// task): a message forwarded to the instance the child is resident on is
// admitted awaited, so, as at one instance, the turn's outcome the caller
// then gets in band is not also a settlement notice (manager/remote).
func (m *Manager) FollowupAwaited(ctx context.Context, caller seam.ParentRef, childID, content string, budget *seam.Budget) (*Sent, error) {
	return m.followup(ctx, caller, childID, content, false, true, budget)
}

// followup is FollowupBudget; awaited: the caller waits for the outcome,
// now (wait) or after the send returns.
func (m *Manager) followup(ctx context.Context, caller seam.ParentRef, childID, content string, wait, awaited bool, budget *seam.Budget) (*Sent, error) {
	if budget != nil {
		if err := budget.Check("budget"); err != nil {
			return nil, err
		}
	}
	if content == "" {
		return nil, newErr(seam.CodeInvalidRequest, "message must not be empty")
	}
	if m.store == nil {
		return nil, newErr(seam.CodePersistenceUnavailable, "continuable children need a session store; none is configured")
	}
	retry := m.pace(childID)
	defer retry.Close()
	storeFails := 0
	// A read or a claim cut short by the caller's ctx says so, not that
	// the child is unavailable.
	cancelled := func(err error) error {
		if ctx.Err() != nil {
			return &seam.Error{Code: seam.CodeCancelled, AgentID: childID, Message: "the send was cancelled", Err: err}
		}
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, cancelled(err)
		}
		hdr, err := m.header(ctx, childID)
		if err != nil {
			return nil, cancelled(err)
		}
		if err := maySend(caller, hdr); err != nil {
			return nil, err
		}
		m.mu.Lock()
		a := m.live[childID]
		m.mu.Unlock()
		if a != nil {
			id, w, route, ok := a.admitBudget(content, agent.SourceUser, wait, budget)
			if ok {
				m.lendTo(w, caller, childID, id)
				t, err := a.turnFor(w)
				if err != nil { // the id is handed out: commit first
					return nil, err
				}
				return &Sent{MessageID: id, Route: Route(route), ChildID: childID, Turn: t}, nil
			}
			// Settling: wait for the release, then resume it cold.
			if err := retry.Again(ctx, a.released, errSettling); err != nil {
				return nil, err
			}
			continue
		}
		// Resident at another live instance: its owner runs it (cluster.go).
		if sent, ok, err := m.sendElsewhere(ctx, hdr, content, wait, awaited, budget); ok {
			return sent, err
		}
		a, err = m.resume(ctx, hdr, caller)
		if err != nil {
			// A race another try can win (transientSend): the next try
			// finds the child resident here or elsewhere, or claims it.
			if transientSend(err) && ctx.Err() == nil && !storeDown(err, &storeFails) {
				if err := retry.Again(ctx, nil, err); err != nil {
					return nil, err
				}
				continue
			}
			return nil, cancelled(err)
		}
		id, w, _, _ := a.admitBudget(content, agent.SourceUser, wait, budget)
		m.lendTo(w, caller, childID, id)
		go a.run()
		t, err := a.turnFor(w)
		if err != nil { // the id is handed out: commit first
			return nil, err // the run stops the child (persistFailed)
		}
		return &Sent{MessageID: id, Route: RouteResumed, ChildID: childID, Turn: t}, nil
	}
}

var errSettling = errors.New("the child was settling here")

var errResident = errors.New("already resident")

// callback mints a child's callback endpoint, if the deployment offers one.
func (m *Manager) callback(self seam.ParentRef) (seam.Callback, func()) {
	if m.opts.Callback == nil {
		return seam.Callback{}, func() {}
	}
	cb, revoke := m.opts.Callback(self)
	if revoke == nil {
		revoke = func() {}
	}
	return cb, revoke
}

// revokingDriver revokes the child's callback endpoint when its activation
// closes the driver (settlement or shutdown).
type revokingDriver struct {
	seam.Driver
	revoke func()
}

func (d revokingDriver) Close() error {
	err := d.Driver.Close()
	d.revoke()
	return err
}

// selfOf is the ParentRef a child uses for its own delegations.
func selfOf(hdr seam.Header, desc seam.Descriptor, journal *agent.Journal) seam.ParentRef {
	return seam.ParentRef{Principal: hdr.Principal, AgentID: hdr.ID, Depth: hdr.Depth, DepthCap: hdr.DepthCap,
		Cwd: hdr.Cwd, Model: desc.Model, Settings: desc.Settings, CompletedTurns: journal.CompletedPrefix}
}
