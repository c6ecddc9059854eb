package manager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// faultStore wraps a store and fails writes on cue: the k-th write (once),
// or every write from the k-th on (the store is gone for the rest of the
// session, which is also what a crash after write k-1 leaves on disk). It
// and counts, per
// child, how often a write it let through cleared the child's active mark.
type faultStore struct {
	inner  *persist.Store
	k      int64
	always bool // fail every write from the k-th on

	n       atomic.Int64
	mu      sync.Mutex
	cleared map[string]int
}

var errInjected = errors.New("injected write failure")

func (f *faultStore) fail() error {
	i := f.n.Add(1)
	if f.k > 0 && (i == f.k || (f.always && i >= f.k)) {
		return fmt.Errorf("write %d: %w", i, errInjected)
	}
	return nil
}

func (f *faultStore) noteCleared(id string) {
	f.mu.Lock()
	f.cleared[id]++
	f.mu.Unlock()
}

func (f *faultStore) Header(ctx context.Context, id string) (seam.Header, error) {
	return f.inner.Header(ctx, id)
}
func (f *faultStore) Descriptor(ctx context.Context, id string) (seam.Descriptor, error) {
	return f.inner.Descriptor(ctx, id)
}
func (f *faultStore) Events(ctx context.Context, id string) ([]agent.Event, error) {
	return f.inner.Events(ctx, id)
}
func (f *faultStore) EventsFrom(ctx context.Context, id string, from int64) ([]agent.Event, error) {
	return f.inner.EventsFrom(ctx, id, from)
}
func (f *faultStore) ClaimOf(ctx context.Context, id string) (seam.Claim, bool, error) {
	return f.inner.ClaimOf(ctx, id)
}
func (f *faultStore) JournalLen(ctx context.Context, id string) (int64, error) {
	return f.inner.JournalLen(ctx, id)
}
func (f *faultStore) Checkpoint(ctx context.Context, id string) (seam.Checkpoint, bool, error) {
	return f.inner.Checkpoint(ctx, id)
}
func (f *faultStore) SetCheckpoint(ctx context.Context, id string, c seam.Checkpoint) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.inner.SetCheckpoint(ctx, id, c)
}
func (f *faultStore) AddNotice(ctx context.Context, p string, n seam.Notice) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.inner.AddNotice(ctx, p, n)
}
func (f *faultStore) TakeNotices(ctx context.Context, p string, take func(seam.Notice) bool) ([]seam.Notice, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.inner.TakeNotices(ctx, p, take)
}

// Renew is not a write the session's outcome depends on (a lost renewal
// only lets a lease run out), so it is not counted or failed.
func (f *faultStore) Renew(ctx context.Context, o seam.Owner) error { return f.inner.Renew(ctx, o) }
func (f *faultStore) Residents(ctx context.Context) ([]seam.Claim, error) {
	return f.inner.Residents(ctx)
}
func (f *faultStore) Close() error { return nil } // the test closes the inner store
func (f *faultStore) PutQuestion(ctx context.Context, q seam.Question) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.inner.PutQuestion(ctx, q)
}
func (f *faultStore) Questions(ctx context.Context, id string) ([]seam.Question, error) {
	return f.inner.Questions(ctx, id)
}
func (f *faultStore) Delete(ctx context.Context, id string) ([]string, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.inner.Delete(ctx, id)
}
func (f *faultStore) Listings(ctx context.Context, p string, page seam.Page) ([]seam.Listing, error) {
	return f.inner.Listings(ctx, p, page)
}
func (f *faultStore) Descendants(ctx context.Context, root string, page seam.Page) ([]seam.Listing, error) {
	return f.inner.Descendants(ctx, root, page)
}
func (f *faultStore) Queued(ctx context.Context, id string) ([]seam.QueuedMessage, error) {
	return f.inner.Queued(ctx, id)
}
func (f *faultStore) WriteChild(ctx context.Context, id string, w seam.ChildWrite) error {
	if err := f.fail(); err != nil {
		return err
	}
	err := f.inner.WriteChild(ctx, id, w)
	if err == nil && w.Settle != nil {
		f.noteCleared(id)
	}
	return err
}

var _ seam.Store = (*faultStore)(nil)

// handedOut is what the scripted session was given by the manager: every
// id, message id and in-band answer that left it without an error.
type handedOut struct {
	mu       sync.Mutex
	children []string
	messages []sentMsg // accepted messages: child, id, text
	reports  []string  // texts of reports accepted for the root principal
	answers  []sentMsg // completed in-band outcomes: child, -, output
	notices  []seam.Notice
}

type sentMsg struct{ child, id, text string }

func (h *handedOut) child(id string) { h.mu.Lock(); h.children = append(h.children, id); h.mu.Unlock() }
func (h *handedOut) message(child, id, text string) {
	h.mu.Lock()
	h.messages = append(h.messages, sentMsg{child, id, text})
	h.mu.Unlock()
}

// scriptProvider runs continuable children whose turns do what their input
// says: "spawn:<prompt>" starts a background grandchild, "report:<text>"
// reports to the parent, "block" waits until interrupted (saying so on
// blocked), anything else is answered "done: <input>". Every turn writes
// its journal as a real driver does.
type scriptProvider struct {
	m       *manager.Manager
	out     *handedOut
	blocked chan string // buffered; gets the child id when a turn blocks
}

func (p *scriptProvider) Name() string                    { return "script" }
func (p *scriptProvider) Capabilities() seam.Capabilities { return seam.Capabilities{} }
func (p *scriptProvider) InheritsParentContext() bool     { return false }
func (p *scriptProvider) Continuable()                    {}
func (p *scriptProvider) Prepare(context.Context, seam.StartRequest) (seam.CreationInputs, error) {
	return seam.CreationInputs{}, nil
}
func (p *scriptProvider) NewDriver(_ context.Context, r seam.DriverRequest) (seam.Driver, error) {
	return &scriptDriver{p: p, j: r.Journal, self: r.Self}, nil
}

type scriptDriver struct {
	p    *scriptProvider
	j    *agent.Journal
	self seam.ParentRef
}

func (d *scriptDriver) Journal() *agent.Journal { return d.j }
func (d *scriptDriver) Close() error            { return nil }

func (d *scriptDriver) RunTurn(ctx context.Context, inputs []agent.Input) agent.TurnResult {
	turn := d.j.NextTurn()
	d.j.Append(agent.Event{Kind: agent.EventTurnStart, Turn: turn})
	for _, in := range inputs {
		d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Source: in.Source,
			Message: &seam.Message{Role: seam.RoleUser, Content: in.Text}})
	}
	text := inputs[len(inputs)-1].Text
	end := func(out string, stop agent.StopReason) agent.TurnResult {
		if out != "" {
			d.j.Append(agent.Event{Kind: agent.EventMessage, Turn: turn, Message: &seam.Message{Role: seam.RoleAssistant, Content: out},
				Usage: &seam.Usage{InputTokens: 1, OutputTokens: 1}})
		}
		d.j.Append(agent.Event{Kind: agent.EventTurnEnd, Turn: turn, StopReason: stop})
		return agent.TurnResult{Output: out, StopReason: stop}
	}
	switch {
	case text == "block":
		d.p.blocked <- d.self.AgentID
		<-ctx.Done()
		return end("", agent.StopAborted)
	case strings.HasPrefix(text, "spawn:"):
		st, err := d.p.m.StartContinuable(ctx, "script", seam.StartRequest{Label: "grandchild", Prompt: text[len("spawn:"):], Parent: d.self}, false)
		if err == nil {
			d.p.out.child(st.ChildID)
			d.p.out.message(st.ChildID, st.MessageID, text[len("spawn:"):])
		}
	case strings.HasPrefix(text, "report:"):
		if _, err := d.p.m.ReportFrom(d.self, text[len("report:"):], manager.DeliveryNextStep); err == nil {
			d.p.out.mu.Lock()
			d.p.out.reports = append(d.p.out.reports, text[len("report:"):])
			d.p.out.mu.Unlock()
		}
	}
	return end("done: "+text, agent.StopCompleted)
}

// epochs counts lifecycle events, so the script can wait for every epoch
// to end without sleeping.
type epochs struct {
	mu           sync.Mutex
	starts, ends int
	changed      chan struct{}
}

func watchEpochs(m *manager.Manager) *epochs {
	e := &epochs{changed: make(chan struct{})}
	m.Subscribe(func(ev manager.Event) {
		e.mu.Lock()
		if ev.Type == manager.EventStart {
			e.starts++
		} else {
			e.ends++
		}
		close(e.changed)
		e.changed = make(chan struct{})
		e.mu.Unlock()
	})
	return e
}

// quiet waits until every epoch started has ended and nothing is resident.
func (e *epochs) quiet(t *testing.T, m *manager.Manager, what string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		e.mu.Lock()
		done := e.starts == e.ends && m.Live() == 0
		ch := e.changed
		e.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s: children still running after 20s (%d epochs started, %d ended, %d live)", what, e.starts, e.ends, m.Live())
		}
	}
}

// runSession runs the scripted session against store and returns what
// was handed out, and whether every step succeeded.
func runSession(t *testing.T, store seam.Store) (*handedOut, []string) {
	t.Helper()
	out := &handedOut{}
	m := manager.New(manager.Options{Store: store, WriteRetryDelay: time.Millisecond})
	p := &scriptProvider{m: m, out: out, blocked: make(chan string, 8)}
	if err := m.Register(p); err != nil {
		t.Fatal(err)
	}
	ep := watchEpochs(m)
	root := seam.ParentRef{Principal: "p", Cwd: "/work"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var failures []string
	step := func(what string, err error) bool {
		if err != nil {
			failures = append(failures, what+": "+err.Error())
			return false
		}
		return true
	}
	answered := func(child, text string, res seam.Result, ok bool) {
		if !ok {
			failures = append(failures, "no answer to "+text)
			return
		}
		if res.StopReason != agent.StopCompleted {
			failures = append(failures, fmt.Sprintf("%s ended %s: %s", text, res.StopReason, res.Diagnostic))
			return
		}
		out.mu.Lock()
		out.answers = append(out.answers, sentMsg{child: child, text: res.Output})
		out.mu.Unlock()
	}

	var a, b string
	if st, err := m.StartContinuable(ctx, "script", seam.StartRequest{Label: "a", Prompt: "a1", Parent: root}, false); step("start a", err) {
		a = st.ChildID
		out.child(a)
		out.message(a, st.MessageID, "a1")
	}
	if st, err := m.StartContinuable(ctx, "script", seam.StartRequest{Label: "b", Prompt: "b1", Parent: root}, true); step("start b", err) {
		b = st.ChildID
		out.child(b)
		out.message(b, st.MessageID, "b1")
		res, ok := st.Wait(ctx)
		answered(b, "b1", res, ok)
	}
	ep.quiet(t, m, "after the starts")
	if a != "" {
		// A cold resume; the turn starts a grandchild, whose settlement
		// notice wakes a again.
		if s, err := m.Followup(ctx, root, a, "spawn:c1", false); step("send a spawn", err) {
			out.message(a, s.MessageID, "spawn:c1")
		}
	}
	if b != "" {
		if s, err := m.Followup(ctx, root, b, "report:halfway", false); step("send b report", err) {
			out.message(b, s.MessageID, "report:halfway")
		}
		if s, err := m.Followup(ctx, root, b, "block", false); step("send b block", err) {
			out.message(b, s.MessageID, "block")
			// Interrupt once the turn blocks, unless b stopped before.
			select {
			case <-p.blocked:
				step("interrupt b", m.Interrupt(root, b))
			case <-ctx.Done():
				t.Fatal("b's blocking turn never started")
			case <-untilQuiet(ep, m):
			}
		}
		if s, err := m.Followup(ctx, root, b, "b3", true); step("send b3", err) {
			out.message(b, s.MessageID, "b3")
			res, ok := s.Wait(ctx)
			answered(b, "b3", res, ok)
		}
	}
	ep.quiet(t, m, "after the follow-ups")
	out.notices = m.TakeNotices("p", "")
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := m.Close(cctx); err != nil {
		t.Fatal(err)
	}
	return out, failures
}

// untilQuiet is closed once every epoch has ended.
func untilQuiet(e *epochs, m *manager.Manager) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			e.mu.Lock()
			done := e.starts == e.ends && m.Live() == 0
			c := e.changed
			e.mu.Unlock()
			if done {
				return
			}
			<-c
		}
	}()
	return ch
}

// checkNothingLost reopens the store and checks that everything handed out
// is in it: each child's record, each accepted message (still queued, or
// in its child's journal), each in-band answer, each report to the root;
// and that every settlement the store recorded (a cleared mark) has its
// notice stored with it.
func checkNothingLost(t *testing.T, dir string, out *handedOut, cleared map[string]int) {
	t.Helper()
	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	journal := func(id string) string {
		events, err := st.Events(ctx, id)
		if err != nil {
			t.Errorf("child %s: journal: %v", id, err)
			return ""
		}
		var b strings.Builder
		for _, e := range events {
			if e.Message != nil {
				b.WriteString(e.Message.Content + "\n")
			}
		}
		return b.String()
	}
	for _, id := range out.children {
		if _, err := st.Header(ctx, id); err != nil {
			t.Errorf("child %s was handed out but is not stored: %v", id, err)
		}
	}
	for _, msg := range out.messages {
		queued, err := st.Queued(ctx, msg.child)
		if err != nil {
			t.Errorf("message %s to %s: %v", msg.id, msg.child, err)
			continue
		}
		found := false
		for _, q := range queued {
			found = found || q.ID == msg.id
		}
		if !found && !strings.Contains(journal(msg.child), msg.text+"\n") {
			t.Errorf("message %s (%q) to %s was accepted but is neither queued nor in the journal", msg.id, msg.text, msg.child)
		}
	}
	for _, ans := range out.answers {
		if !strings.Contains(journal(ans.child), ans.text+"\n") {
			t.Errorf("%s answered %q in band, but its journal does not hold it", ans.child, ans.text)
		}
	}
	stored, err := st.TakeNotices(ctx, seam.PrincipalAddress("p"), nil)
	if err != nil {
		t.Fatal(err)
	}
	notices := append(append([]seam.Notice(nil), out.notices...), stored...)
	for _, r := range out.reports {
		found := false
		for _, n := range notices {
			found = found || (n.Source == agent.SourceReport && strings.Contains(n.Text, r))
		}
		if !found {
			t.Errorf("report %q was accepted but no notice holds it", r)
		}
	}
	// Settlements: a's and its grandchildren's epochs never end in band,
	// so each cleared mark has a notice: the root's for a, the parent's
	// inbox or journal for a grandchild.
	for id, n := range cleared {
		h, err := st.Header(ctx, id)
		if err != nil || h.Label == "b" {
			continue
		}
		got := 0
		if h.Parent == seam.PrincipalAddress("p") {
			for _, nt := range notices {
				if nt.ChildID == id && nt.Source == agent.SourceSettled {
					got++
				}
			}
		} else {
			queued, _ := st.Queued(ctx, h.Parent)
			for _, q := range queued {
				if strings.Contains(q.Text, id) {
					got++
				}
			}
			got += strings.Count(journal(h.Parent), "Background subagent "+id)
		}
		if got < n {
			t.Errorf("child %s (%s) settled %d times in the store but its parent has %d notices", id, h.Label, n, got)
		}
	}
}

// The fault-injection suite: for every k over the scripted session, a
// store that fails the k-th write (once, or from then on) never lets an id
// or message out uncommitted, never loses an accepted message, answer,
// report or settlement notice; a single failure is absorbed by the retry.
func TestFaultInjectionNothingLeavesUncommittedNothingIsLost(t *testing.T) {
	// A clean run counts the writes the session makes.
	dir := t.TempDir()
	inner, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clean := &faultStore{inner: inner, cleared: map[string]int{}}
	out, failures := runSession(t, clean)
	inner.Close()
	if len(failures) > 0 {
		t.Fatalf("the clean session failed: %v", failures)
	}
	checkNothingLost(t, dir, out, clean.cleared)
	writes := clean.n.Load()
	if len(out.children) < 3 || len(out.reports) != 1 || len(out.answers) != 2 {
		t.Fatalf("the clean session handed out %d children, %d reports, %d answers; want 3, 1, 2", len(out.children), len(out.reports), len(out.answers))
	}
	t.Logf("the session makes %d writes", writes)
	for _, always := range []bool{false, true} {
		for k := int64(1); k <= writes+2; k++ {
			name := fmt.Sprintf("write %d fails once", k)
			if always {
				name = fmt.Sprintf("writes from %d on fail", k)
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				inner, err := persist.Open(dir, persist.Options{})
				if err != nil {
					t.Fatal(err)
				}
				fs := &faultStore{inner: inner, k: k, always: always, cleared: map[string]int{}}
				out, failures := runSession(t, fs)
				inner.Close()
				if !always && len(failures) > 0 {
					t.Errorf("one failed write was not absorbed by the retry: %v", failures)
				}
				checkNothingLost(t, dir, out, fs.cleared)
			})
		}
	}
}
