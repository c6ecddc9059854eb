package extturn

import (
	"context"
	"sync"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
)

// OneShot runs drv for one turn with req's prompt and returns it as a
// manager.Run: the run ends with that turn; Dispose cancels the turn, waits
// for it, and closes the driver. ctx governs the run's whole life.
func OneShot(ctx context.Context, id string, drv manager.Driver, prompt string) manager.Run {
	runCtx, cancel := context.WithCancel(ctx)
	r := &run{id: id, cancel: cancel, done: make(chan struct{}), drv: drv}
	go func() {
		defer close(r.done)
		tr := drv.RunTurn(runCtx, []agent.Input{{Text: prompt, Source: agent.SourceUser}})
		r.res = manager.Result{Output: tr.Output, Structured: tr.Structured, Diagnostic: tr.Diagnostic, StopReason: tr.StopReason,
			Usage: manager.Usage{InputTokens: tr.Usage.InputTokens, OutputTokens: tr.Usage.OutputTokens, CostUSD: tr.Usage.CostUSD}}
	}()
	return r
}

type run struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
	drv    manager.Driver
	res    manager.Result
	once   sync.Once
}

func (r *run) ID() string                      { return r.id }
func (r *run) Agent() *agent.Agent             { return nil }
func (r *run) Done() <-chan struct{}           { return r.done }
func (r *run) Result() (manager.Result, error) { <-r.done; return r.res, nil }
func (r *run) Dispose() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
		_ = r.drv.Close()
	})
}
