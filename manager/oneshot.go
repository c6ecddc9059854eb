package manager

import (
	"context"
	"fmt"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager/admission"
	"github.com/mcp-subagent/mcp-subagent/manager/persister"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Start validates req against the named provider and starts a one-shot
// run: one turn from the provider's driver, then disposed. It returns once
// the run is ready (its driver is built); ctx governs the run's whole
// life. Cancelled before the run is ready, Start returns CANCELLED and no
// lifecycle event was emitted; cancelled after, the turn ends aborted.
func (m *Manager) Start(ctx context.Context, name string, req seam.StartRequest) (seam.Run, error) {
	p, err := m.validate(name, &req)
	if err != nil {
		return nil, err
	}
	if req.Isolation != "" {
		// A one-shot child is not stored: nothing would list its worktree.
		return nil, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: `field "isolation": needs a continuable child (a provider that continues children, and the session store); this one runs one-shot`}
	}
	req.ID = NewID()
	c, err := m.build(ctx, p, name, req, seam.ModeOneShot)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &oneShot{m: m, id: req.ID, parent: c.hdr.Parent, provider: name, drv: c.drv, cancel: cancel, done: make(chan struct{}),
		principal: req.Parent.Principal, at: m.adm.Stamp(), loan: m.adm.Lend(req.Parent.AgentID, req.ID, "")}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		cancel()
		r.loan.End(m.adm)
		_ = c.drv.Close() // and its callback token
		return nil, newErr(seam.CodeDraining, "the server is shutting down; no new subagents start")
	}
	m.runs[r.id] = r
	m.wg.Add(1)
	m.mu.Unlock()
	m.budgets.Open(r.id, c.hdr.Parent, m.budgets.Grant(req.Budget))
	m.emit(Event{Type: EventStart, RunID: r.id, Provider: name, Local: true})
	stopProgress := func() {}
	if req.Progress != nil {
		_, stopProgress = agent.TurnProgress(c.drv.Journal(), req.Progress)
	}
	go r.run(runCtx, req.Prompt, stopProgress)
	return r, nil
}

// oneShot is a one-shot run: the driver's one turn, run by the manager.
type oneShot struct {
	m        *Manager
	id       string
	parent   string // the parent's address
	provider string
	drv      seam.Driver // closes the callback with it
	cancel   context.CancelFunc
	done     chan struct{}
	res      seam.Result // set before done is closed
	once     sync.Once
	// Admission: its principal, its place in the FIFO order, and its
	// calling agent's slot lent to it while the caller waits for the run.
	principal string
	at        int64
	loan      *admission.Loan
}

func (r *oneShot) ID() string            { return r.id }
func (r *oneShot) Done() <-chan struct{} { return r.done }
func (r *oneShot) Result() seam.Result   { <-r.done; return r.res }

// run runs the turn, then emits the end event.
func (r *oneShot) run(ctx context.Context, prompt string, stopProgress func()) {
	defer r.m.wg.Done()
	tr := r.runTurn(ctx, prompt)
	r.m.budgets.Close(r.id)
	stopProgress()
	r.res = resultOf(tr)
	r.m.mu.Lock()
	delete(r.m.runs, r.id)
	r.m.mu.Unlock()
	close(r.done)
	r.m.emit(Event{Type: EventEnd, RunID: r.id, Provider: r.provider, Local: true,
		StopReason: r.res.StopReason, Output: r.res.Output})
}

func (r *oneShot) Dispose() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		if err := r.drv.Close(); err != nil {
			r.m.log.Warn("closing a one-shot child's driver failed", "agent_id", r.id, "err", err)
		}
	})
}

// resultOf is a turn's result as the seam reports it.
func resultOf(tr agent.TurnResult) seam.Result {
	return normalize(seam.Result{Output: tr.Output, Structured: tr.Structured, Diagnostic: tr.Diagnostic,
		StopReason: tr.StopReason, Usage: tr.Usage})
}

// normalize bounds the diagnostic and turns an unknown stop reason into a
// failure (with a diagnostic saying so): only completed is success.
func normalize(res seam.Result) seam.Result {
	res.Diagnostic = truncate.Bound(res.Diagnostic, seam.MaxDiagnostic)
	switch res.StopReason {
	case agent.StopCompleted, agent.StopAborted, agent.StopError, agent.StopMaxTokens, agent.StopRefusal, agent.StopBudget:
	default:
		if res.Diagnostic == "" {
			res.Diagnostic = fmt.Sprintf("the provider reported unknown stop reason %q", res.StopReason)
		}
		res.StopReason = agent.StopError
	}
	return res
}

// built is a new child not yet running: its record and its
// driver, which revokes the child's callback when closed.
type built struct {
	hdr   seam.Header
	desc  seam.Descriptor
	drv   seam.Driver
	gated bool            // the driver is a GatedDriver
	gate  *persister.Gate // its tool rounds' wait for the record, when deferred
}

// build makes a new child from p, one-shot or continuable alike: it asks
// for the creation inputs, builds the journal from the seed, mints the
// callback and builds the driver. A failure (or ctx ending) leaves nothing
// behind.
func (m *Manager) build(ctx context.Context, p seam.Provider, name string, req seam.StartRequest, mode seam.Mode) (b built, err error) {
	// The worktree comes first: the provider prepares the child in it.
	wt, err := m.wt.Make(ctx, name, &req)
	if err != nil {
		return built{}, startErr(ctx, name, err)
	}
	defer func() {
		if err != nil {
			m.dropWorktree(req.ID, wt)
		}
	}()
	in, err := p.Prepare(ctx, req)
	if err != nil {
		return built{}, startErr(ctx, name, err)
	}
	journal, err := agent.NewJournal(in.Seed)
	if err != nil {
		return built{}, &seam.Error{Code: seam.CodeInvalidRequest, Provider: name, Message: "the provider's seed breaks the journal invariants", Err: err}
	}
	hdr := seam.Header{ID: req.ID, Parent: req.Parent.Address(), Principal: req.Parent.Principal, Depth: req.Depth,
		DepthCap: req.DepthCap, Mode: mode, Provider: name, Label: req.Label, Cwd: req.Cwd,
		CreatedAt: m.createdNow(), SeedLen: int64(len(in.Seed)), Model: in.Model, Worktree: wt}
	if req.Parent.AgentID == "" {
		hdr.Session = req.Parent.Session
	}
	desc := seam.Descriptor{Version: seam.DescriptorVersion, Mode: mode, Provider: name, Label: req.Label,
		Model: in.Model, Effort: in.Effort, Persona: req.Persona, ToolFilter: req.ToolFilter, OutputSchema: req.OutputSchema, Session: in.Session,
		Settings: req.Parent.Settings}
	self := selfOf(hdr, desc, journal)
	cb, revoke := m.callback(self)
	gate := &persister.Gate{}
	drv, err := p.NewDriver(ctx, seam.DriverRequest{Header: hdr, Descriptor: desc, Journal: journal, Self: self, Callback: cb,
		Budget: gate.Hook(m.budgets.Hook(hdr.ID, hdr.Parent)), Ask: m.asker(hdr)})
	if err != nil {
		revoke()
		return built{}, startErr(ctx, name, err)
	}
	_, gated := drv.(GatedDriver)
	drv = revokingDriver{drv, revoke}
	if err := ctx.Err(); err != nil {
		_ = drv.Close()
		return built{}, startErr(ctx, name, err)
	}
	return built{hdr: hdr, desc: desc, drv: drv, gated: gated, gate: gate}, nil
}
