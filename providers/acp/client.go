package acp

import (
	"context"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// client is our side of one ACP connection: what the agent may call on us.
//
// The SDK calls SessionUpdate on the goroutine that processes every
// notification in order, and holds each response until the notifications
// before it are processed; its queue holds 1024 and overflow closes the
// connection. So nothing here blocks: updates and permission outcomes are
// appended to an unbounded queue that the turn goroutine drains, and only
// that goroutine writes the journal.
type client struct {
	policy     string
	ask        seam.AskFunc  // set under PermissionAsk when the manager can ask
	askTimeout time.Duration // how long a question waits for the person
	// turnDone is closed when the turn is cancelled: a question held open
	// is withdrawn (under mu; a new one per turn).
	turnDone   chan struct{}
	flow       *flow // told of each update handled; nil: no flow control
	mu         sync.Mutex
	callbacks  bool // under mu: set once the session's servers are known
	items      []item
	cancelling bool                           // the turn was cancelled: permission requests get "cancelled"
	seen       map[acpsdk.ToolCallId]seenTool // what tool_call updates said of each call
	signal     chan struct{}                  // buffered 1: items are waiting
}

var _ acpsdk.Client = (*client)(nil)

// permissionCatchUp bounds how long a permission request waits for the
// updates sent before it to be handled.
const permissionCatchUp = time.Second

// item is one thing the turn goroutine must record.
type item struct {
	session acpsdk.SessionId
	update  *acpsdk.SessionUpdate
	perm    *permission
}

// permission is how a permission request was answered.
type permission struct {
	title    string
	outcome  string   // "allowed", "denied" or "cancelled"
	option   string   // the option selected, if any
	callback bool     // a tool of our callback server, allowed whatever the policy
	names    []string // the names the request and the tool_call updates gave the tool, for the log
	// Under PermissionAsk: the question asked, who answered and the
	// answer's words (seam.Answer.By, .Text).
	question, by, answer string
}

func newClient(policy string) *client {
	return &client{policy: policy, signal: make(chan struct{}, 1), seen: map[acpsdk.ToolCallId]seenTool{}, turnDone: make(chan struct{})}
}

func (c *client) push(it item) {
	c.mu.Lock()
	c.items = append(c.items, it)
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// take removes and returns every waiting item.
func (c *client) take() []item {
	c.mu.Lock()
	defer c.mu.Unlock()
	its := c.items
	c.items = nil
	return its
}

// beginTurn clears the queue (updates outside a turn are not recorded)
// and the cancelled state.
func (c *client) beginTurn() {
	c.mu.Lock()
	c.items, c.cancelling = nil, false
	clear(c.seen)
	select {
	case <-c.turnDone:
		c.turnDone = make(chan struct{})
	default:
	}
	c.mu.Unlock()
}

// cancel makes every later permission request of this turn answer
// "cancelled", as ACP requires once session/cancel is sent.
func (c *client) cancel() {
	c.mu.Lock()
	if !c.cancelling {
		close(c.turnDone)
	}
	c.cancelling = true
	c.mu.Unlock()
}

// SessionUpdate queues the update; it never blocks.
func (c *client) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	u := n.Update
	c.remember(u)
	c.push(item{session: n.SessionId, update: &u})
	if c.flow != nil {
		c.flow.handledOne()
	}
	return nil
}

// offerCallbacks records that the session was given our callback server:
// permission requests for its tools are then allowed whatever the policy
// (they are our own channel, see isCallbackTool).
func (c *client) offerCallbacks(on bool) {
	c.mu.Lock()
	c.callbacks = on
	c.mu.Unlock()
}

// remember keeps the names and kind a tool_call update gives a call, for
// its permission request.
func (c *client) remember(u acpsdk.SessionUpdate) {
	var id acpsdk.ToolCallId
	var names []string
	var kind acpsdk.ToolKind
	switch {
	case u.ToolCall != nil:
		id, names, kind = u.ToolCall.ToolCallId, toolNames(&u.ToolCall.Title, u.ToolCall.Meta), u.ToolCall.Kind
	case u.ToolCallUpdate != nil:
		id, names = u.ToolCallUpdate.ToolCallId, toolNames(u.ToolCallUpdate.Title, u.ToolCallUpdate.Meta)
		if u.ToolCallUpdate.Kind != nil {
			kind = *u.ToolCallUpdate.Kind
		}
	default:
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seen[id]
	s.names = append(s.names, names...)
	if kind != "" {
		s.kind = kind
	}
	c.seen[id] = s
}

// RequestPermission answers at once by the policy: deny selects a reject
// option, allow an allow option; with no fitting option, or once the turn
// is cancelled, the outcome is "cancelled". A request for one of our
// callback server's tools is allowed whatever the policy: the child's
// report, list_agents and delegations are our own channel, checked by
// this server (depth, permissions of the token), and an agent that asks
// before calling them could not call back at all under deny. No request
// is left pending.
//
// Under PermissionAsk (with an AskFunc) a request that is not for a
// callback tool is held open and asked of the person instead: the SDK
// calls each request on a goroutine of its own, so the wait blocks
// neither the reader nor the notifications (see the type's note); it ends
// with the person's answer, the deadline's deny, the turn's cancel or the
// connection's end (ctx).
func (c *client) RequestPermission(ctx context.Context, r acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	if c.flow != nil {
		// The tool_call update before this request may not be handled yet.
		c.flow.waitCaughtUp(permissionCatchUp)
	}
	c.mu.Lock()
	cancelling, callbacks := c.cancelling, c.callbacks
	seen := c.seen[r.ToolCall.ToolCallId]
	turnDone := c.turnDone
	c.mu.Unlock()
	title := toolTitle(r.ToolCall)
	p := &permission{title: title, outcome: "cancelled", names: append(toolNames(r.ToolCall.Title, r.ToolCall.Meta), seen.names...)}
	var out acpsdk.RequestPermissionOutcome
	if !cancelling && c.ask != nil && !(callbacks && isCallbackTool(r.ToolCall, seen)) {
		out = c.askPerson(ctx, turnDone, r, p)
		c.push(item{session: r.SessionId, perm: p})
		return acpsdk.RequestPermissionResponse{Outcome: out}, nil
	}
	if !cancelling {
		prefer := []acpsdk.PermissionOptionKind{acpsdk.PermissionOptionKindRejectOnce, acpsdk.PermissionOptionKindRejectAlways}
		verdict := "denied"
		p.callback = callbacks && isCallbackTool(r.ToolCall, seen)
		if c.policy == PermissionAllow || p.callback {
			prefer = []acpsdk.PermissionOptionKind{acpsdk.PermissionOptionKindAllowOnce, acpsdk.PermissionOptionKindAllowAlways}
			verdict = "allowed"
		}
		if id, ok := pickOption(r.Options, prefer); ok {
			out.Selected = &acpsdk.RequestPermissionOutcomeSelected{OptionId: id}
			p.outcome, p.option = verdict, string(id)
		} else if verdict == "denied" {
			// No reject option: cancelling the request denies it too.
			p.outcome = "denied"
		}
	}
	if out.Selected == nil {
		out.Cancelled = &acpsdk.RequestPermissionOutcomeCancelled{}
	}
	c.push(item{session: r.SessionId, perm: p})
	return acpsdk.RequestPermissionResponse{Outcome: out}, nil
}

// askPerson asks the person about r and maps the answer to an outcome:
// "allow" picks an allow option, "deny" a reject option (none: the
// request is cancelled, which denies it too), an option's own words that
// option; a withdrawn question (turn cancelled, connection gone) is
// "cancelled".
func (c *client) askPerson(ctx context.Context, turnDone <-chan struct{}, r acpsdk.RequestPermissionRequest, p *permission) acpsdk.RequestPermissionOutcome {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-turnDone:
			cancel()
		case <-ctx.Done():
		}
	}()
	req := seam.AskRequest{Kind: seam.QuestionApproval, Message: "permission to run: " + p.title, Timeout: c.askTimeout, Fallback: "deny"}
	for _, o := range r.Options {
		req.Choices = append(req.Choices, o.Name)
		if o.Kind == acpsdk.PermissionOptionKindRejectOnce || o.Kind == acpsdk.PermissionOptionKindRejectAlways {
			req.Declines = append(req.Declines, o.Name)
		}
	}
	q := c.ask(ctx, req)
	a := *q.Answer
	p.question, p.by, p.answer = q.ID, a.By, a.Text
	var out acpsdk.RequestPermissionOutcome
	if a.Outcome == seam.OutcomeCancelled {
		out.Cancelled = &acpsdk.RequestPermissionOutcomeCancelled{}
		return out
	}
	var id acpsdk.PermissionOptionId
	var ok bool
	switch a.Text {
	case "allow":
		id, ok = pickOption(r.Options, []acpsdk.PermissionOptionKind{acpsdk.PermissionOptionKindAllowOnce, acpsdk.PermissionOptionKindAllowAlways})
	case "deny":
		id, ok = pickOption(r.Options, []acpsdk.PermissionOptionKind{acpsdk.PermissionOptionKindRejectOnce, acpsdk.PermissionOptionKindRejectAlways})
	default:
		for _, o := range r.Options {
			if o.Name == a.Text {
				id, ok = o.OptionId, true
				break
			}
		}
	}
	p.outcome = "denied"
	if a.Outcome == seam.OutcomeAccepted {
		p.outcome = "allowed"
	}
	if ok {
		out.Selected = &acpsdk.RequestPermissionOutcomeSelected{OptionId: id}
		p.option = string(id)
	} else {
		// No fitting option: cancelling the request denies it.
		out.Cancelled = &acpsdk.RequestPermissionOutcomeCancelled{}
		p.outcome = "denied"
	}
	return out
}

// pickOption returns the first option of the most preferred kind.
func pickOption(opts []acpsdk.PermissionOption, prefer []acpsdk.PermissionOptionKind) (acpsdk.PermissionOptionId, bool) {
	for _, k := range prefer {
		for _, o := range opts {
			if o.Kind == k {
				return o.OptionId, true
			}
		}
	}
	return "", false
}

func toolTitle(tc acpsdk.ToolCallUpdate) string {
	if tc.Title != nil && *tc.Title != "" {
		return *tc.Title
	}
	if tc.Kind != nil {
		return string(*tc.Kind) + " " + string(tc.ToolCallId)
	}
	return "tool call " + string(tc.ToolCallId)
}

// The client offers no file system and no terminal (initialize advertises
// neither), so an agent that calls these anyway gets an error: the agent
// works in its cwd with its own tools.

func (c *client) ReadTextFile(context.Context, acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	return acpsdk.ReadTextFileResponse{}, notOffered(acpsdk.ClientMethodFsReadTextFile)
}

func (c *client) WriteTextFile(context.Context, acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	return acpsdk.WriteTextFileResponse{}, notOffered(acpsdk.ClientMethodFsWriteTextFile)
}

func (c *client) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, notOffered(acpsdk.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, notOffered(acpsdk.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, notOffered(acpsdk.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, notOffered(acpsdk.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, notOffered(acpsdk.ClientMethodTerminalWaitForExit)
}

func notOffered(method string) error {
	return acpsdk.NewMethodNotFound(method)
}
