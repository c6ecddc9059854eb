package view

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/manager/retention"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// rig is a real manager running spawn children on a fake chat server, a
// view over it, and the view served on loopback. A prompt containing
// "hold" is answered only once release is closed; one containing
// "ASK-USER" asks the person "Which colour?" (ask_user) and ends with
// "GOT: " and the tool's result.
type rig struct {
	m       *manager.Manager
	st      *memstore.Store
	v       *Server
	srv     *httptest.Server
	release chan struct{}
	once    sync.Once
	// returned receives each request's path when its handler returns.
	returned chan string
	// holding receives a held prompt once the model call holds it.
	holding chan string
}

var (
	alice = seam.ParentRef{Principal: "alice", Cwd: "/tmp"}
	bob   = seam.ParentRef{Principal: "bob", Cwd: "/tmp"}
)

func newRig(t *testing.T, o Options) *rig {
	t.Helper()
	r := &rig{st: memstore.New(), release: make(chan struct{}), returned: make(chan string, 64), holding: make(chan string, 64)}
	stop := make(chan struct{})
	fake := fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		if strings.Contains(req.LastUserText(), "ASK-USER") {
			if res, ok := req.LastToolResult(); ok {
				return fakeopenai.Reply{Text: "GOT: " + res}
			}
			return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "ask_user", Arguments: `{"question":"Which colour?"}`}}}
		}
		if strings.Contains(req.LastUserText(), "hold") {
			select {
			case r.holding <- req.LastUserText():
			default:
			}
			select {
			case <-r.release:
			case <-stop:
			}
		}
		return fakeopenai.Reply{Text: "answer to " + req.LastUserText(), Usage: &fakeopenai.Usage{PromptTokens: 7, CompletionTokens: 3}}
	})
	r.m = manager.New(manager.Options{Store: r.st})
	if err := r.m.Register(spawn.New(spawn.Options{Model: "m", AskUser: true,
		Client: openai.New(transport.Config{BaseURL: fake.URL(), APIKey: "k", RetryBaseDelay: time.Millisecond})})); err != nil {
		t.Fatal(err)
	}
	r.v = New(r.m, o)
	h := r.v.Handler()
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(w, req)
		select {
		case r.returned <- req.URL.Path:
		default:
		}
	}))
	t.Cleanup(func() {
		r.srv.CloseClientConnections()
		r.v.Close()
		r.srv.Close()
		close(stop)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.m.Close(ctx)
		fake.Close()
	})
	return r
}

func (r *rig) unhold() { r.once.Do(func() { close(r.release) }) }

func (r *rig) start(t *testing.T, parent seam.ParentRef, prompt string) string {
	t.Helper()
	st, err := r.m.StartContinuable(context.Background(), "spawn", seam.StartRequest{Label: prompt, Prompt: prompt, Parent: parent}, false)
	if err != nil {
		t.Fatal(err)
	}
	return st.ChildID
}

func (r *rig) token(t *testing.T, p seam.ParentRef) string {
	t.Helper()
	tok, err := r.v.Token(p.Principal)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (r *rig) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := http.Get(r.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (r *rig) post(t *testing.T, path, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// stream is an open SSE response read event by event.
type stream struct {
	res    *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc
}

type event struct {
	name string
	data string
}

func (r *rig) open(t *testing.T, path string) *stream {
	t.Helper()
	// Bounded: a stream that never says what the test waits for fails it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.URL+path, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		cancel()
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, b)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("GET %s: Content-Type %q, want text/event-stream", path, ct)
	}
	s := &stream{res: res, br: bufio.NewReader(res.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.cancel(); s.res.Body.Close() }

// next reads one event, failing on a malformed frame: each is "event:"
// then one "data:" line of JSON and a blank line; comment lines (pings)
// are skipped.
func (s *stream) next(t *testing.T) event {
	t.Helper()
	var e event
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (partial event %+v)", err, e)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && e.name != "":
			if !json.Valid([]byte(e.data)) {
				t.Fatalf("event %s: data is not one line of JSON: %q", e.name, e.data)
			}
			return e
		case line == "":
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: ") && e.name == "":
			e.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && e.name != "" && e.data == "":
			e.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("malformed SSE line %q (event so far %+v)", line, e)
		}
	}
}

func decode[T any](t *testing.T, e event, name string) T {
	t.Helper()
	if e.name != name {
		t.Fatalf("event %q (%s), want %q", e.name, e.data, name)
	}
	var v T
	if err := json.Unmarshal([]byte(e.data), &v); err != nil {
		t.Fatalf("event %s: %v", name, err)
	}
	return v
}

// waitRow reads tree changes until id's row has status want.
func waitRow(t *testing.T, s *stream, id, want string) Row {
	t.Helper()
	for {
		c := decode[Change](t, s.next(t), "change")
		for _, r := range c.Upsert {
			if r.ID == id && r.Status == want {
				return r
			}
		}
	}
}

func TestTokensAreRandomPerPrincipalAndStable(t *testing.T) {
	v := New(manager.New(manager.Options{Store: memstore.New()}), Options{})
	defer v.Close()
	a1, _ := v.Token("alice")
	a2, _ := v.Token("alice")
	b, _ := v.Token("bob")
	if a1 != a2 {
		t.Errorf("alice's token changed: %q then %q", a1, a2)
	}
	if a1 == b {
		t.Errorf("alice and bob share the token %q", a1)
	}
	for _, tok := range []string{a1, b} {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(raw) < 16 {
			t.Errorf("token %q: %d bytes (%v), want at least 16 random bytes", tok, len(raw), err)
		}
	}
	u, _ := v.URL("http://127.0.0.1:1/", "alice")
	if u != "http://127.0.0.1:1/?token="+a1 {
		t.Errorf("URL = %q", u)
	}
	v.Close()
	if _, err := v.Token("carol"); err == nil {
		t.Error("a closed view minted a token")
	}
}

func TestWithoutTheTokenNothingIsShown(t *testing.T) {
	r := newRig(t, Options{})
	id := r.start(t, alice, "quick")
	for _, path := range []string{"/", "/?token=", "/?token=guess"} {
		code, body := r.get(t, path)
		if code != http.StatusForbidden || !strings.Contains(body, "token required") {
			t.Errorf("GET %s: %d %q, want 403 and a token-required page", path, code, body)
		}
		if strings.Contains(body, id) || strings.Contains(body, "app.js") {
			t.Errorf("GET %s without the token serves the app or data: %q", path, body)
		}
	}
	for _, c := range []struct {
		path string
		want int
	}{
		{"/api/tree", http.StatusUnauthorized},
		{"/api/tree?token=guess", http.StatusForbidden},
		{"/api/transcript?id=" + id, http.StatusUnauthorized},
		{"/api/transcript?token=guess&id=" + id, http.StatusForbidden},
	} {
		code, body := r.get(t, c.path)
		if code != c.want || strings.Contains(body, id+`"`) && !strings.Contains(body, "token") {
			t.Errorf("GET %s: %d %q, want %d", c.path, code, body, c.want)
		}
		if !strings.Contains(body, `field \"token\"`) {
			t.Errorf("GET %s: %q does not name the token", c.path, body)
		}
	}
	for _, p := range []string{"/api/interrupt", "/api/send", "/api/interrupt?token=guess"} {
		if code, out := r.post(t, p, `{"id":"`+id+`","message":"x"}`); code != http.StatusUnauthorized && code != http.StatusForbidden {
			t.Errorf("POST %s: %d %v, want 401 or 403", p, code, out)
		}
	}
	tok := r.token(t, alice)
	if code, body := r.get(t, "/?token="+tok); code != http.StatusOK || !strings.Contains(body, "assets/app.js") {
		t.Errorf("GET / with the token: %d %q", code, body)
	}
	if code, body := r.get(t, "/assets/app.js"); code != http.StatusOK || !strings.Contains(body, "EventSource") {
		t.Errorf("GET /assets/app.js: %d, %d bytes", code, len(body))
	}
}

func TestTreeStreamsSnapshotThenChangesLive(t *testing.T) {
	r := newRig(t, Options{Tick: 20 * time.Millisecond})
	held := r.start(t, alice, "hold on")
	other := r.start(t, bob, "bob's child")
	s := r.open(t, "/api/tree?token="+r.token(t, alice))
	snap := decode[Snapshot](t, s.next(t), "snapshot")
	if snap.Total != 1 || len(snap.Rows) != 1 || snap.Rows[0].ID != held {
		t.Fatalf("alice's snapshot = %+v, want only %s", snap, held)
	}
	row := snap.Rows[0]
	if row.Status != manager.StatusRunning || row.Provider != "spawn" || row.Depth != 1 || row.Parent != seam.PrincipalAddress("alice") {
		t.Errorf("row = %+v, want running spawn depth 1 under principal:alice", row)
	}
	for _, r := range snap.Rows {
		if r.ID == other {
			t.Errorf("alice sees bob's child %s", other)
		}
	}
	r.unhold()
	done := waitRow(t, s, held, manager.StatusReady)
	if done.LastStopReason != "completed" || done.Usage == nil || done.Usage.InputTokens != 7 {
		t.Errorf("settled row = %+v, want completed with the turn's usage", done)
	}
}

func TestTranscriptStreamsEntriesLive(t *testing.T) {
	r := newRig(t, Options{})
	id := r.start(t, alice, "hold the line")
	s := r.open(t, "/api/transcript?id="+id+"&token="+r.token(t, alice))
	head := decode[TranscriptHead](t, s.next(t), "transcript")
	if head.ID != id || head.Status != manager.StatusRunning {
		t.Fatalf("head = %+v, want %s running", head.Transcript, id)
	}
	// The prompt is in the first event or comes live after it (the turn
	// may not have journaled it yet); the answer is held until unhold.
	entries := head.Entries
	prompt := func() bool {
		for _, e := range entries {
			if e.Role == "assistant" {
				t.Fatalf("an answer %q before the model gave it", e.Text)
			}
			if e.Source == "user" && e.Text == "hold the line" {
				return true
			}
		}
		return false
	}
	for !prompt() {
		entries = append(entries, decode[TranscriptMore](t, s.next(t), "entries").Entries...)
	}
	r.unhold()
	waitAnswered(t, s)
}

// waitAnswered reads a transcript stream until the model's answer and the
// turn's completed end have come.
func waitAnswered(t *testing.T, s *stream) {
	t.Helper()
	var answer, ended bool
	for !answer || !ended {
		m := decode[TranscriptMore](t, s.next(t), "entries")
		for _, e := range m.Entries {
			answer = answer || e.Role == "assistant" && strings.HasPrefix(e.Text, "answer to ")
			ended = ended || e.Kind == string(agent.EventTurnEnd) && e.StopReason == "completed"
		}
	}
}

func TestActionsGoThroughTheManagersAuthority(t *testing.T) {
	r := newRig(t, Options{})
	id := r.start(t, alice, "hold it")
	at, bt := r.token(t, alice), r.token(t, bob)
	body := `{"id":"` + id + `","message":"more"}`
	for _, p := range []string{"/api/interrupt?token=" + bt, "/api/send?token=" + bt} {
		code, out := r.post(t, p, body)
		if code != http.StatusForbidden || !strings.HasPrefix(fmt.Sprint(out["error"]), "UNAUTHORIZED") {
			t.Errorf("bob POST %s on alice's child: %d %v, want 403 UNAUTHORIZED", p, code, out)
		}
	}
	code, _ := r.get(t, "/api/transcript?id="+id+"&token="+bt)
	if code != http.StatusForbidden {
		t.Errorf("bob reading alice's transcript: %d, want 403", code)
	}
	for _, c := range []struct{ body, field string }{
		{`{"message":"x"}`, `field "id"`},
		{`{"id":"` + id + `","message":"  "}`, `field "message"`},
		{`not json`, `not JSON`},
	} {
		code, out := r.post(t, "/api/send?token="+at, c.body)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), c.field) {
			t.Errorf("send %s: %d %v, want 400 naming %s", c.body, code, out, c.field)
		}
	}
	if code, out := r.post(t, "/api/send?token="+at, body, "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("send from a foreign origin: %d %v, want 403", code, out)
	}
	// Alice's own: the send queues behind the held turn, the interrupt
	// stops it.
	select {
	case <-r.holding:
	case <-time.After(20 * time.Second):
		t.Fatal("the child's model call never came")
	}
	code, out := r.post(t, "/api/send?token="+at, body)
	if code != http.StatusOK || out["message_id"] == "" || out["route"] != string(manager.RouteQueued) {
		t.Fatalf("alice's send: %d %v, want a queued message", code, out)
	}
	w, err := r.m.Watch(context.Background(), alice, id)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if code, out := r.post(t, "/api/interrupt?token="+at, `{"id":"`+id+`"}`); code != http.StatusOK || out["accepted"] != true {
		t.Fatalf("alice's interrupt: %d %v", code, out)
	}
	for {
		tr, err := r.m.Transcript(context.Background(), alice, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tr.Entries {
			if e.Kind == string(agent.EventTurnEnd) {
				if e.StopReason != "aborted" {
					t.Fatalf("the interrupted turn ended %s, want aborted", e.StopReason)
				}
				return
			}
		}
		select {
		case <-w.C:
		case <-w.Settled:
		case <-time.After(10 * time.Second):
			t.Fatal("the interrupted turn did not end")
		}
	}
}

func TestStreamsEndOnDisconnectAndClose(t *testing.T) {
	r := newRig(t, Options{})
	id := r.start(t, alice, "hold still")
	tok := r.token(t, alice)
	tree := r.open(t, "/api/tree?token="+tok)
	decode[Snapshot](t, tree.next(t), "snapshot")
	tr := r.open(t, "/api/transcript?id="+id+"&token="+tok)
	decode[TranscriptHead](t, tr.next(t), "transcript")
	tree.close()
	if p := <-r.returned; p != "/api/tree" {
		t.Fatalf("handler %s returned, want the tree's", p)
	}
	// Close ends the other stream (its client still reading) and waits.
	closed := make(chan struct{})
	go func() { r.v.Close(); close(closed) }()
	if p := <-r.returned; p != "/api/transcript" {
		t.Fatalf("handler %s returned, want the transcript's", p)
	}
	<-closed
	// What was sent before Close may still be buffered; after it, the
	// stream ends.
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, err := tr.br.ReadString('\n'); err != nil {
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Error("the transcript stream goes on after Close")
	}
	if code, _ := r.get(t, "/api/tree?token="+tok); code != http.StatusForbidden {
		t.Errorf("a closed view's tree answers %d, want 403 (its tokens are gone)", code)
	}
}

func TestTreeOfAThousand(t *testing.T) {
	r := newRig(t, Options{MaxRows: 600})
	if err := seed.Children(r.st, alice, 1000); err != nil {
		t.Fatal(err)
	}
	s := r.open(t, "/api/tree?token="+r.token(t, alice))
	snap := decode[Snapshot](t, s.next(t), "snapshot")
	if snap.Total != 1000 || len(snap.Rows) != 600 || snap.Omitted != 400 {
		t.Fatalf("snapshot: total %d, %d rows, %d omitted; want 1000, 600, 400", snap.Total, len(snap.Rows), snap.Omitted)
	}
	for i, row := range snap.Rows {
		if want := fmt.Sprintf("agent-%016d", 400+i); row.ID != want || row.Status != manager.StatusReady {
			t.Fatalf("row %d = %s %s, want %s ready (the newest, in creation order)", i, row.ID, row.Status, want)
		}
	}
}

// Children pruned from the store leave the tree: with none resident the
// stream still re-reads it (slowly) and sends their ids as removed.
func TestPrunedChildrenLeaveTheTree(t *testing.T) {
	r := newRig(t, Options{Tick: 5 * time.Millisecond})
	if err := seed.Children(r.st, alice, 3); err != nil {
		t.Fatal(err)
	}
	s := r.open(t, "/api/tree?token="+r.token(t, alice))
	if snap := decode[Snapshot](t, s.next(t), "snapshot"); snap.Total != 3 {
		t.Fatalf("snapshot of %d rows, want 3", snap.Total)
	}
	res, err := r.m.Prune(context.Background(), retention.Request{Principals: []string{"alice"}, Before: time.Now().Add(time.Hour)})
	if err != nil || len(res.Pruned) != 3 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	// A re-read during the prune may see it half done: changes add up.
	removed := map[string]bool{}
	for len(removed) < 3 {
		c := decode[Change](t, s.next(t), "change")
		if len(c.Upsert) != 0 {
			t.Errorf("change = %+v, want only removals", c)
		}
		for _, id := range c.Remove {
			removed[id] = true
		}
		if len(removed) == 3 && c.Total != 0 {
			t.Errorf("the last change says %d rows remain, want 0", c.Total)
		}
	}
}
