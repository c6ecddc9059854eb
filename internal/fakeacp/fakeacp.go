// Package fakeacp is a fake Agent Client Protocol agent for tests, built on
// acp-go-sdk's agent side. A test binary re-executed with FAKE_ACP_AGENT=1
// calls Main instead of running its tests. The prompt's text picks the
// scenario; calls are recorded in FAKE_ACP_DIR/calls.jsonl and sessions
// kept in FAKE_ACP_DIR/sessions so a later process can load them.
//
// "write file NAME" asks permission (an edit) and writes NAME in its cwd
// only when allowed.
//
// Callback scenarios reach the server back through the HTTP MCP server
// given in session/new: "report: X" calls report, "delegate: P" calls
// subagent with prompt P (provider FAKE_ACP_PROVIDER, default "acp").
package fakeacp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
)

// Environment the fake reads. FAKE_ACP_LOAD=1 offers session/load;
// FAKE_ACP_HTTP=1 accepts HTTP MCP servers.
const (
	EnvFake     = "FAKE_ACP_AGENT"
	EnvDir      = "FAKE_ACP_DIR"
	EnvLoad     = "FAKE_ACP_LOAD"
	EnvHTTP     = "FAKE_ACP_HTTP"
	EnvProvider = "FAKE_ACP_PROVIDER"
)

// Record is one line of calls.jsonl.
type Record struct {
	PID        int             `json:"pid"`
	Method     string          `json:"method"`
	Session    string          `json:"session,omitempty"`
	Cwd        string          `json:"cwd,omitempty"`
	McpServers json.RawMessage `json:"mcp_servers,omitempty"`
	Text       string          `json:"text,omitempty"`
	Env        []string        `json:"env,omitempty"`
	Child      int             `json:"child,omitempty"` // a grandchild's pid
}

// Exchange is one prompt and answer of a fake session's history.
type Exchange struct{ User, Agent string }

// SaveSession writes a session's history where the fake reads it (so a test
// can give a session a long history to load).
func SaveSession(dir, id string, h []Exchange) { (&fakeAgent{dir: dir}).save(id, h) }

type fakeAgent struct {
	conn      *acpsdk.AgentSideConnection // set once, before ready is closed
	ready     chan struct{}
	dir       string
	load      bool
	http      bool
	mu        sync.Mutex
	histories map[string][]Exchange
	callbacks map[string]*callbackServer // by session
}

var _ acpsdk.Agent = (*fakeAgent)(nil)
var _ acpsdk.AgentLoader = (*fakeAgent)(nil)

// Main serves ACP on stdin/stdout until the client goes away.
func Main() int {
	f := &fakeAgent{dir: os.Getenv(EnvDir), load: os.Getenv(EnvLoad) == "1", http: os.Getenv(EnvHTTP) == "1",
		histories: map[string][]Exchange{}, callbacks: map[string]*callbackServer{}, ready: make(chan struct{})}
	f.record(Record{Method: "start", Env: os.Environ()})
	// The connection reads and dispatches requests as soon as it is made,
	// before the assignment below; handlers wait for it (under load a
	// prompt could otherwise meet a nil connection).
	conn := acpsdk.NewAgentSideConnection(f, os.Stdout, os.Stdin)
	conn.SetLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	f.conn = conn
	close(f.ready)
	<-conn.Done()
	return 0
}

// c is the connection, once Main has it.
func (f *fakeAgent) c() *acpsdk.AgentSideConnection {
	<-f.ready
	return f.conn
}

func (f *fakeAgent) record(r Record) {
	r.PID = os.Getpid()
	b, _ := json.Marshal(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	fh, err := os.OpenFile(filepath.Join(f.dir, "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake: ", err)
		return
	}
	defer fh.Close()
	fh.Write(append(b, '\n'))
}

func (f *fakeAgent) sessionFile(id string) string {
	return filepath.Join(f.dir, "sessions", id+".json")
}

func (f *fakeAgent) save(id string, h []Exchange) {
	_ = os.MkdirAll(filepath.Join(f.dir, "sessions"), 0o700)
	b, _ := json.Marshal(h)
	_ = os.WriteFile(f.sessionFile(id), b, 0o600)
}

func (f *fakeAgent) history(id string) ([]Exchange, error) {
	b, err := os.ReadFile(f.sessionFile(id))
	if err != nil {
		return nil, err
	}
	var h []Exchange
	err = json.Unmarshal(b, &h)
	return h, err
}

func (f *fakeAgent) Initialize(context.Context, acpsdk.InitializeRequest) (acpsdk.InitializeResponse, error) {
	return acpsdk.InitializeResponse{ProtocolVersion: acpsdk.ProtocolVersionNumber,
		AgentCapabilities: acpsdk.AgentCapabilities{LoadSession: f.load, McpCapabilities: acpsdk.McpCapabilities{Http: f.http}},
		AuthMethods:       []acpsdk.AuthMethod{}}, nil
}

func (f *fakeAgent) NewSession(_ context.Context, p acpsdk.NewSessionRequest) (acpsdk.NewSessionResponse, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "sess-" + hex.EncodeToString(b[:])
	servers, _ := json.Marshal(p.McpServers)
	f.record(Record{Method: "session/new", Session: id, Cwd: p.Cwd, McpServers: servers})
	if cb := callbackOf(p.McpServers); cb != nil {
		f.mu.Lock()
		f.callbacks[id] = cb
		f.mu.Unlock()
	}
	f.save(id, nil)
	return acpsdk.NewSessionResponse{SessionId: acpsdk.SessionId(id)}, nil
}

func (f *fakeAgent) LoadSession(ctx context.Context, p acpsdk.LoadSessionRequest) (acpsdk.LoadSessionResponse, error) {
	servers, _ := json.Marshal(p.McpServers)
	f.record(Record{Method: "session/load", Session: string(p.SessionId), Cwd: p.Cwd, McpServers: servers})
	if cb := callbackOf(p.McpServers); cb != nil {
		f.mu.Lock()
		f.callbacks[string(p.SessionId)] = cb
		f.mu.Unlock()
	}
	h, err := f.history(string(p.SessionId))
	if err != nil {
		return acpsdk.LoadSessionResponse{}, fmt.Errorf("no such session: %w", err)
	}
	// Replay the history, as ACP requires, before answering.
	for _, x := range h {
		_ = f.c().SessionUpdate(ctx, acpsdk.SessionNotification{SessionId: p.SessionId, Update: acpsdk.UpdateUserMessageText(x.User)})
		_ = f.c().SessionUpdate(ctx, acpsdk.SessionNotification{SessionId: p.SessionId, Update: acpsdk.UpdateAgentMessageText(x.Agent)})
	}
	return acpsdk.LoadSessionResponse{}, nil
}

func (f *fakeAgent) send(sid acpsdk.SessionId, u acpsdk.SessionUpdate) {
	// Not under the prompt's ctx: a cancelled turn still flushes its updates.
	_ = f.c().SessionUpdate(context.Background(), acpsdk.SessionNotification{SessionId: sid, Update: u})
}

func (f *fakeAgent) Prompt(ctx context.Context, p acpsdk.PromptRequest) (acpsdk.PromptResponse, error) {
	var text string
	for _, b := range p.Prompt {
		if b.Text != nil {
			text += b.Text.Text
		}
	}
	sid := p.SessionId
	f.record(Record{Method: "session/prompt", Session: string(sid), Text: text})
	stopWith := func(r acpsdk.StopReason) (acpsdk.PromptResponse, error) {
		f.send(sid, acpsdk.UpdateAgentMessageText("partial answer"))
		return acpsdk.PromptResponse{StopReason: r}, nil
	}
	if res, ok := f.callbackScenario(ctx, sid, text); ok {
		return res, nil
	}
	if res, ok := f.shapeScenario(ctx, sid, text); ok {
		return res, nil
	}
	switch {
	case strings.Contains(text, "max_tokens"):
		return stopWith(acpsdk.StopReasonMaxTokens)
	case strings.Contains(text, "refusal"):
		return stopWith(acpsdk.StopReasonRefusal)
	case strings.Contains(text, "max_turn_requests"):
		return stopWith(acpsdk.StopReasonMaxTurnRequests)
	case strings.Contains(text, "unknown_stop"):
		return stopWith("gave_up")
	case strings.Contains(text, "late crash"):
		// Stdout ends first, stderr's last words come after: what a
		// crashing agent does when the reader of its stderr is slow.
		signal.Ignore(syscall.SIGTERM)
		os.Stdout.Close()
		time.Sleep(100 * time.Millisecond)
		fmt.Fprintln(os.Stderr, "fatal: the fake agent crashed on purpose, late")
		os.Exit(3)
	case strings.Contains(text, "crash"):
		fmt.Fprintln(os.Stderr, "fatal: the fake agent crashed on purpose")
		os.Exit(3)
	case strings.HasPrefix(text, "write file "):
		return f.writeFile(ctx, sid, strings.Fields(strings.TrimPrefix(text, "write file "))[0])
	case strings.Contains(text, "permission"):
		outcome := f.askEdit(ctx, sid, "call_1", "Write config", false)
		status := acpsdk.ToolCallStatusFailed
		if outcome == "allow" {
			status = acpsdk.ToolCallStatusCompleted
		}
		f.send(sid, acpsdk.UpdateToolCall("call_1", acpsdk.WithUpdateStatus(status)))
		f.send(sid, acpsdk.UpdateAgentMessageText("permission outcome: "+outcome))
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
	case strings.Contains(text, "slow"):
		f.send(sid, acpsdk.UpdateAgentMessageText("working"))
		f.record(Record{Method: "blocking", Session: string(sid)})
		select {
		case <-ctx.Done():
			f.send(sid, acpsdk.UpdateAgentMessageText(" and stopped"))
			f.record(Record{Method: "cancel-honoured", Session: string(sid)})
			return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonCancelled}, nil
		case <-time.After(30 * time.Second):
			return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
		}
	case strings.Contains(text, "stubborn"):
		// Ignores session/cancel, and has a grandchild in its process group.
		cmd := exec.Command("/bin/sleep", "60")
		if err := cmd.Start(); err == nil {
			f.record(Record{Method: "grandchild", Child: cmd.Process.Pid})
		}
		f.send(sid, acpsdk.UpdateAgentMessageText("not listening"))
		f.record(Record{Method: "blocking", Session: string(sid)})
		time.Sleep(60 * time.Second)
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
	case strings.Contains(text, "tools"):
		f.send(sid, acpsdk.UpdateAgentMessageText("Let me look."))
		f.send(sid, acpsdk.UpdateAgentThoughtText("thinking hard"))
		f.send(sid, acpsdk.UpdatePlan(acpsdk.PlanEntry{Content: "read the file", Priority: acpsdk.PlanEntryPriorityHigh, Status: acpsdk.PlanEntryStatusPending}))
		f.send(sid, acpsdk.StartToolCall("call_r", "Read file", acpsdk.WithStartKind(acpsdk.ToolKindRead), acpsdk.WithStartStatus(acpsdk.ToolCallStatusPending)))
		f.send(sid, acpsdk.UpdateToolCall("call_r", acpsdk.WithUpdateStatus(acpsdk.ToolCallStatusInProgress)))
		f.send(sid, acpsdk.UpdateToolCall("call_r", acpsdk.WithUpdateStatus(acpsdk.ToolCallStatusCompleted)))
		f.send(sid, acpsdk.UpdateAgentMessageText("Found "))
		f.send(sid, acpsdk.UpdateAgentMessageText("it."))
		f.send(sid, acpsdk.SessionUpdate{UsageUpdate: &acpsdk.SessionUsageUpdate{Used: 1000, Size: 200000, Cost: &acpsdk.Cost{Amount: 0.25, Currency: "USD"}}})
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn, Usage: &acpsdk.Usage{InputTokens: 100, OutputTokens: 20, TotalTokens: 120}}, nil
	case strings.Contains(text, "flood"):
		for range FloodChunks {
			f.send(sid, acpsdk.UpdateAgentMessageText("x"))
		}
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
	}
	if strings.Contains(text, "pause") {
		time.Sleep(300 * time.Millisecond)
	}
	h, err := f.history(string(sid))
	if err != nil {
		return acpsdk.PromptResponse{}, errors.New("unknown session")
	}
	answer := fmt.Sprintf("echo: %s (turn %d)", text, len(h)+1)
	f.send(sid, acpsdk.UpdateAgentMessageText(answer[:6]))
	f.send(sid, acpsdk.UpdateAgentMessageText(answer[6:]))
	f.save(string(sid), append(h, Exchange{User: text, Agent: answer}))
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
}

// askEdit starts an edit tool call and asks permission for it (the
// request's tool call carries its kind when withKind), records the outcome
// as "permission-outcome" and returns it: the option id picked,
// "cancelled", or "error: ..." when the request failed.
func (f *fakeAgent) askEdit(ctx context.Context, sid acpsdk.SessionId, id acpsdk.ToolCallId, title string, withKind bool) string {
	f.send(sid, acpsdk.StartToolCall(id, title, acpsdk.WithStartKind(acpsdk.ToolKindEdit), acpsdk.WithStartStatus(acpsdk.ToolCallStatusPending)))
	tc := acpsdk.ToolCallUpdate{ToolCallId: id, Title: acpsdk.Ptr(title)}
	if withKind {
		tc.Kind = acpsdk.Ptr(acpsdk.ToolKindEdit)
	}
	resp, err := f.c().RequestPermission(ctx, acpsdk.RequestPermissionRequest{SessionId: sid, ToolCall: tc,
		Options: []acpsdk.PermissionOption{
			{Kind: acpsdk.PermissionOptionKindAllowOnce, Name: "Allow once", OptionId: "allow"},
			{Kind: acpsdk.PermissionOptionKindAllowAlways, Name: "Always allow", OptionId: "allow-always"},
			{Kind: acpsdk.PermissionOptionKindRejectOnce, Name: "Reject once", OptionId: "reject"},
		}})
	outcome := "cancelled"
	if err != nil {
		outcome = "error: " + err.Error()
	} else if resp.Outcome.Selected != nil {
		outcome = string(resp.Outcome.Selected.OptionId)
	}
	f.record(Record{Method: "permission-outcome", Session: string(sid), Text: outcome})
	return outcome
}

// writeFile asks permission to write name in the agent's cwd, as an agent
// asks before an edit, and writes it ("written by the fake agent") only
// when an allow option is picked. The answer says which.
func (f *fakeAgent) writeFile(ctx context.Context, sid acpsdk.SessionId, name string) (acpsdk.PromptResponse, error) {
	outcome := f.askEdit(ctx, sid, "call_w", "Write "+name, true)
	if outcome != "allow" && outcome != "allow-always" {
		f.send(sid, acpsdk.UpdateToolCall("call_w", acpsdk.WithUpdateStatus(acpsdk.ToolCallStatusFailed)))
		f.send(sid, acpsdk.UpdateAgentMessageText(fmt.Sprintf("I did not write %s: permission was not given (%s).", name, outcome)))
		if outcome == "cancelled" && ctx.Err() != nil {
			return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonCancelled}, nil
		}
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
	}
	if err := os.WriteFile(name, []byte("written by the fake agent\n"), 0o644); err != nil {
		f.send(sid, acpsdk.UpdateToolCall("call_w", acpsdk.WithUpdateStatus(acpsdk.ToolCallStatusFailed)))
		f.send(sid, acpsdk.UpdateAgentMessageText("writing failed: "+err.Error()))
		return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
	}
	f.send(sid, acpsdk.UpdateToolCall("call_w", acpsdk.WithUpdateStatus(acpsdk.ToolCallStatusCompleted)))
	f.send(sid, acpsdk.UpdateAgentMessageText("I wrote "+name+"."))
	return acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}, nil
}

// FloodChunks is more than the SDK's notification queue (1024) holds.
const FloodChunks = 5000

func (f *fakeAgent) Cancel(_ context.Context, p acpsdk.CancelNotification) error {
	f.record(Record{Method: "session/cancel", Session: string(p.SessionId)})
	return nil
}

func (f *fakeAgent) Authenticate(context.Context, acpsdk.AuthenticateRequest) (acpsdk.AuthenticateResponse, error) {
	return acpsdk.AuthenticateResponse{}, nil
}

func (f *fakeAgent) CloseSession(context.Context, acpsdk.CloseSessionRequest) (acpsdk.CloseSessionResponse, error) {
	return acpsdk.CloseSessionResponse{}, nil
}

func (f *fakeAgent) ListSessions(context.Context, acpsdk.ListSessionsRequest) (acpsdk.ListSessionsResponse, error) {
	return acpsdk.ListSessionsResponse{}, nil
}

func (f *fakeAgent) ResumeSession(context.Context, acpsdk.ResumeSessionRequest) (acpsdk.ResumeSessionResponse, error) {
	return acpsdk.ResumeSessionResponse{}, errors.New("not supported")
}

func (f *fakeAgent) SetSessionConfigOption(context.Context, acpsdk.SetSessionConfigOptionRequest) (acpsdk.SetSessionConfigOptionResponse, error) {
	return acpsdk.SetSessionConfigOptionResponse{}, nil
}

func (f *fakeAgent) SetSessionMode(context.Context, acpsdk.SetSessionModeRequest) (acpsdk.SetSessionModeResponse, error) {
	return acpsdk.SetSessionModeResponse{}, nil
}
