package manager

import (
	"context"
	"fmt"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
)

// Start validates req against the named provider and starts a one-shot run.
// It returns once the run is ready; ctx governs the run's whole life.
func (m *Manager) Start(ctx context.Context, name string, req StartRequest) (Run, error) {
	p, err := m.validate(name, &req)
	if err != nil {
		return nil, err
	}
	req.ID = NewID()
	revoke := m.mintCallback(&req, nil)
	run, err := p.Start(ctx, req)
	if err != nil {
		revoke()
		if ctx.Err() != nil {
			return nil, &Error{Code: CodeCancelled, Provider: name, Message: "the start was cancelled", Err: err}
		}
		return nil, err
	}
	h := &handle{Run: run, m: m, provider: name, revoke: revoke}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		h.Dispose() // the run and its callback token
		return nil, newErr(CodeDraining, "the server is shutting down; no new subagents start")
	}
	m.runs[run.ID()] = h
	m.wg.Add(1)
	m.mu.Unlock()
	m.emit(Event{Type: EventStart, RunID: run.ID(), Provider: name, Local: run.Agent() != nil})
	go h.watch()
	return h, nil
}

// RunOnce starts a one-shot run, waits for its result and disposes it.
func (m *Manager) RunOnce(ctx context.Context, name string, req StartRequest) (string, Result, error) {
	run, err := m.Start(ctx, name, req)
	if err != nil {
		return "", Result{}, err
	}
	defer run.Dispose()
	<-run.Done()
	res, err := run.Result()
	return run.ID(), res, err
}

// handle wraps a provider's run to emit the end event and bound the
// diagnostic.
type handle struct {
	Run
	m        *Manager
	provider string
	revoke   func()
	once     sync.Once
}

func (h *handle) watch() {
	defer h.m.wg.Done()
	<-h.Run.Done()
	res, err := h.Result()
	h.m.mu.Lock()
	delete(h.m.runs, h.ID())
	h.m.mu.Unlock()
	e := Event{Type: EventEnd, RunID: h.ID(), Provider: h.provider, Local: h.Agent() != nil,
		StopReason: res.StopReason, Output: res.Output}
	if err != nil {
		e.StopReason = agent.StopError
	}
	h.m.emit(e)
}

func (h *handle) Result() (Result, error) {
	res, err := h.Run.Result()
	return normalize(res), err
}

// normalize bounds the diagnostic and turns an unknown stop reason into a
// failure (with a diagnostic saying so): only completed is success.
func normalize(res Result) Result {
	res.Diagnostic = truncate.Bound(res.Diagnostic, MaxDiagnostic)
	switch res.StopReason {
	case agent.StopCompleted, agent.StopAborted, agent.StopError, agent.StopMaxTokens, agent.StopRefusal:
	default:
		if res.Diagnostic == "" {
			res.Diagnostic = fmt.Sprintf("the provider reported unknown stop reason %q", res.StopReason)
		}
		res.StopReason = agent.StopError
	}
	return res
}

func (h *handle) Dispose() {
	h.once.Do(func() {
		h.Run.Dispose()
		h.revoke()
	})
}

// mintCallback gives req (a one-shot start) a callback endpoint bound to
// the child; the returned func revokes it.
func (m *Manager) mintCallback(req *StartRequest, journal *agent.Journal) func() {
	if m.opts.Callback == nil {
		return func() {}
	}
	cb, revoke := m.opts.Callback(req.Self(journal))
	req.Callback = cb
	if revoke == nil {
		revoke = func() {}
	}
	return revoke
}
