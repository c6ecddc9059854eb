package manager

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/admission"
	"github.com/mcp-subagent/mcp-subagent/manager/budget"
	"github.com/mcp-subagent/mcp-subagent/manager/persister"
	"github.com/mcp-subagent/mcp-subagent/manager/questions"
	"github.com/mcp-subagent/mcp-subagent/manager/sessions"
	"github.com/mcp-subagent/mcp-subagent/manager/validate"
	"github.com/mcp-subagent/mcp-subagent/manager/worktrees"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// DefaultMaxDepth is the deployment's depth cap when Options leaves it zero.
const DefaultMaxDepth = 3

// Options configures a Manager. Zero values mean the defaults given.
type Options struct {
	// MaxDepth is the deployment's absolute depth cap; zero: DefaultMaxDepth.
	MaxDepth int
	// Logger receives the manager's logs; nil: discarded.
	Logger *slog.Logger
	// Store keeps continuable children; nil: only one-shot runs work, and
	// listing is unavailable.
	Store seam.Store
	// OnNotice, when set, is told of every notice queued for a root
	// principal (to push it to connected sessions). It must not block.
	OnNotice func(principal string, n seam.Notice)
	// SessionConnected, when set, reports whether a root session is still
	// connected here; a notice waits for its originating session only
	// while it is connected here or, on a store that shares sessions
	// (seam.Sessions), at another instance. Call Manager.SessionOpened on
	// a root session's calls and Manager.SessionGone when one disconnects.
	// Nil: none is connected here.
	SessionConnected func(session string) bool
	// Callback, when set, mints the endpoint external children use to reach
	// this server back; nil: none is offered.
	Callback seam.CallbackFunc
	// WriteAttempts is how often a store write is tried before it counts
	// as failed (the child then stops, and its caller gets the error);
	// zero: DefaultWriteAttempts.
	WriteAttempts int
	// WriteRetryDelay is the wait before the first retry, doubled after
	// each; zero: DefaultWriteRetryDelay.
	WriteRetryDelay time.Duration
	// OwnerID names this manager in the store's residency claims (see
	// Store); two managers sharing a store must have different ones.
	// Empty: a random id, new for each Manager.
	OwnerID string
	// LeaseTTL is how long the manager's claims stay valid unless renewed;
	// it renews them every third of it while any child is resident. Zero
	// or negative: DefaultLeaseTTL. A restart on an exclusive store (bbolt) takes over
	// a dead manager's claims at once, whatever the TTL.
	LeaseTTL time.Duration
	// Clock is the manager's clock for its lease (the expiry its claims
	// and renewals carry) and for judging other owners' claims expired in
	// the takeover sweep; the store still has the last word on expiry.
	// nil: time.Now. Tests set it to model an instance paused past its
	// lease.
	Clock func() time.Time
	// Budget is the deployment's default budget and its caps; zero: none.
	Budget budget.Limits
	// MaxRunningChildren caps the turns in flight per principal, counted
	// over its whole tree (one-shot, foreground and background children,
	// in-process and external); a turn past it waits, FIFO. Zero:
	// admission.DefaultMaxRunningChildren; negative: no cap.
	MaxRunningChildren int
	// MaxRunningTotal caps the turns in flight across principals, the same
	// way; zero or negative: no cap beyond each principal's.
	MaxRunningTotal int
	// Worktrees is the directory children's worktrees live in
	// (isolation "worktree"), one per child named by its id; empty: the
	// isolation is refused.
	Worktrees string
	// Removed is called with the ids of the children a prune removed from
	// the store (a root and its descendants), after the removal, so that
	// what the server keeps per child outside the store (the sandbox's
	// tool caches) goes with them. nil: nothing else is removed.
	Removed func(ids []string)
}

// DefaultLeaseTTL is Options.LeaseTTL's default.
const DefaultLeaseTTL = 30 * time.Second

// Defaults for Options.WriteAttempts and WriteRetryDelay: a write is given
// up after about 140 ms of retries.
const (
	DefaultWriteAttempts   = 4
	DefaultWriteRetryDelay = 20 * time.Millisecond
)

// EventType names a lifecycle event.
type EventType string

const (
	EventStart EventType = "subagent/start"
	EventEnd   EventType = "subagent/end"
)

// Event is an observe-only lifecycle event.
type Event struct {
	Type       EventType
	RunID      string
	Provider   string
	Local      bool
	StopReason agent.StopReason // end events only
	Output     string           // end events only: the last assistant message
}

// ProviderInfo describes a registered provider.
type ProviderInfo struct {
	Name                  string
	Capabilities          seam.Capabilities
	InheritsParentContext bool
	Description           string
	Continuable           bool // it can run background, continuable children
	// Models are the model names a request may choose (ModelNamer), the
	// default first; nil: the provider takes its own model ids.
	Models []string
}

// Manager owns every child's lifecycle. Build one in main and pass it down.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	providers map[string]seam.Provider
	order     []string
	listeners map[int]func(Event)
	nextL     int
	runs      map[string]*oneShot // live one-shot runs
	closed    bool
	wg        sync.WaitGroup // one per live one-shot run and per activation

	store      seam.Store
	ctx        context.Context // activations live under it; Close cancels it
	cancel     context.CancelFunc
	live       map[string]*activation
	resumeMu   sync.Mutex // serialises cold resumes
	pendingSig map[string]chan struct{}
	// corrupt holds children whose stored journal failed to decode on a
	// read (a resume, a fold, a recovery), with the reason listings show
	// for them from then on, even where a checkpoint would have spared the
	// read.
	corrupt map[string]string
	// lastCreated is the creation time given to the last child: each new
	// one gets a later one, so a listing cursor (creation order) never
	// has a new child slip in before it.
	lastCreated time.Time
	retry       persister.Retry

	owner     string // Options.OwnerID, or a random one
	renewing  bool   // the renewer runs (under mu)
	sweeping  bool   // Recover ran: the renewer also sweeps for expired claims, and runs until Close (under mu)
	swept     bool   // a sweep runs (under mu)
	retaining bool   // Retain's loop runs (under mu)

	// The policies (see hosts.go for what they ask of the manager).
	budgets   *budget.Book
	adm       *admission.Queue  // the caps on turns in flight
	wt        *worktrees.Keeper // isolation "worktree"
	questions *questions.Board  // the children's questions waiting for the person
	sessions  *sessions.Tracker // root sessions' liveness (sessions.go)
}

// New returns a manager with no providers.
func New(opts Options) *Manager {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = DefaultMaxDepth
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, log: log, providers: map[string]seam.Provider{},
		listeners: map[int]func(Event){}, runs: map[string]*oneShot{},
		store: opts.Store, ctx: ctx, cancel: cancel, live: map[string]*activation{}, pendingSig: map[string]chan struct{}{}, corrupt: map[string]string{},
		retry: persister.Retry{Attempts: cmp.Or(opts.WriteAttempts, DefaultWriteAttempts), Delay: cmp.Or(opts.WriteRetryDelay, DefaultWriteRetryDelay)},
		owner: cmp.Or(opts.OwnerID, "manager-"+NewID()[len("agent-"):]),
		adm:   admission.New(opts.MaxRunningChildren, opts.MaxRunningTotal),
		wt:    worktrees.New(opts.Worktrees, log)}
	var bs budget.Store // a nil interface, not a nil store in one
	if opts.Store != nil {
		bs = opts.Store
	}
	m.budgets = budget.New(opts.Budget, bs, log)
	m.questions = questions.New(policyHost{m}, ctx.Done())
	m.sessions = m.newSessions()
	return m
}

// Persistent reports whether the manager has a session store, which
// continuable children need.
func (m *Manager) Persistent() bool { return m.store != nil }

// Live reports the number of resident continuable children (running or
// idle): work that keeps a daemon up with no session connected.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}

// MaxDepth returns the deployment's depth cap.
func (m *Manager) MaxDepth() int { return m.opts.MaxDepth }

// Register adds a provider under its name.
func (m *Manager) Register(p seam.Provider) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := p.Name()
	if name == "" {
		return newErr(seam.CodeInvalidRequest, "a provider needs a non-empty name")
	}
	if _, dup := m.providers[name]; dup {
		return &seam.Error{Code: seam.CodeDuplicateProvider, Provider: name,
			Message: fmt.Sprintf("a provider named %q is already registered", name)}
	}
	m.providers[name] = p
	m.order = append(m.order, name)
	return nil
}

// Remove unregisters a provider: new starts are refused; accepted runs go on.
func (m *Manager) Remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.providers, name)
	for i, n := range m.order {
		if n == name {
			m.order = append(m.order[:i:i], m.order[i+1:]...)
			break
		}
	}
}

// Providers lists the registered providers in registration order.
func (m *Manager) Providers() []ProviderInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]ProviderInfo, 0, len(m.order))
	for _, n := range m.order {
		p := m.providers[n]
		info := ProviderInfo{Name: n, Capabilities: p.Capabilities(), InheritsParentContext: p.InheritsParentContext()}
		if d, ok := p.(seam.Describer); ok {
			info.Description = d.Description()
		}
		_, info.Continuable = p.(seam.Continuable)
		if mn, ok := p.(seam.ModelNamer); ok {
			info.Models = mn.Models()
		}
		out = append(out, info)
	}
	return out
}

// Subscribe registers fn for lifecycle events. Events are observe-only: a
// listener's panic is recovered and logged and never reaches the run.
func (m *Manager) Subscribe(fn func(Event)) (cancel func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextL
	m.nextL++
	m.listeners[id] = fn
	return func() {
		m.mu.Lock()
		delete(m.listeners, id)
		m.mu.Unlock()
	}
}

func (m *Manager) emit(e Event) {
	m.mu.Lock()
	ls := make([]func(Event), 0, len(m.listeners))
	for _, l := range m.listeners {
		ls = append(ls, l)
	}
	m.mu.Unlock()
	for _, l := range ls {
		func() {
			defer func() {
				if r := recover(); r != nil {
					m.log.Error("subagent event listener panicked", "event", e.Type, "panic", r)
				}
			}()
			l(e)
		}()
	}
}

// validate checks req against the named provider without starting
// anything (package validate; isolation, package worktrees). It fills in
// the request's derived fields (ID excepted) and returns the provider.
func (m *Manager) validate(name string, req *seam.StartRequest) (seam.Provider, error) {
	m.mu.Lock()
	p, ok := m.providers[name]
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, newErr(seam.CodeDraining, "the server is shutting down; no new subagents start")
	}
	if !ok {
		return nil, &seam.Error{Code: seam.CodeNoProvider, Provider: name,
			Message: fmt.Sprintf("no provider named %q; available: %s", name, m.names())}
	}
	if err := validate.Start(p, name, req); err != nil {
		return nil, err
	}
	if req.Cwd == "" {
		req.Cwd = req.Parent.Cwd
	}
	ictx, cancel := m.bg()
	defer cancel()
	if err := m.wt.Check(ictx, name, req); err != nil {
		return nil, err
	}
	if err := validate.Depth(name, req, m.opts.MaxDepth); err != nil {
		return nil, err
	}
	return p, nil
}

func (m *Manager) names() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.order) == 0 {
		return "none"
	}
	return fmt.Sprintf("%q", m.order)
}

// NewID returns a fresh child id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "agent-" + hex.EncodeToString(b[:])
}

// Close refuses new starts, stops every resident continuable child (their
// turns end aborted; their claims stay so the next start announces them,
// as after a crash), and waits for accepted one-shot runs to end or ctx to
// expire; runs still going when ctx expires are disposed. Last it lets the
// manager's lease go (Renew with the present time), so a manager started
// next on the same store takes the claims over at once.
func (m *Manager) Close(ctx context.Context) error {
	defer m.letGo(ctx)
	defer m.sessions.Drop(ctx)
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	live := make([]*oneShot, 0, len(m.runs))
	for _, r := range m.runs {
		live = append(live, r)
	}
	m.mu.Unlock()
	for _, r := range live {
		r.Dispose()
	}
	<-done
	return nil
}

// createdNow is a new child's creation time: now, or just after the last
// child's when the clock has not moved on (or went back).
func (m *Manager) createdNow() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := time.Now().UTC()
	if !t.After(m.lastCreated) {
		t = m.lastCreated.Add(time.Nanosecond)
	}
	m.lastCreated = t
	return t
}
