//go:build e2e

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// guarded is an app as newApp builds it over a fake chat API, serving
// --http on a loopback port as serve --http does, with the protections
// hooks turns off (the zero value: every one on).
type guarded struct {
	*app
	base  string // http://127.0.0.1:PORT
	token string // the bearer token tokenless --http minted; "" with hooks.anonymous
	ctx   context.Context
}

func newGuarded(t *testing.T, fake *fakeopenai.Server, hooks insecureHooks) *guarded {
	t.Helper()
	t.Setenv("OPENAI_API_KEY", "test-key")
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.DiscardHandler)
	cfg := Config{LLM: LLMConfig{BaseURL: fake.URL(), Model: "fake-model"}}
	a, err := newApp(ctx, serveOptions{}, cfg, openDir(t), false, log)
	if err != nil {
		t.Fatal(err)
	}
	a.insecure, a.web.anyHost = hooks, hooks.anyHost
	ln, err := listenHTTP("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := a.httpAuth(cfg.HTTP, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveHTTP(ctx, ln, a, hc, log) }()
	t.Cleanup(func() { cancel(); <-done; a.close() })
	g := &guarded{app: a, base: "http://" + ln.Addr().String(), ctx: ctx}
	if len(hc.Tokens) > 0 {
		g.token = hc.Tokens[0].Token
	}
	return g
}

// localChild starts a background child of principal local as a stdio
// session does (the daemon marks its calls so) and waits for its first
// turn to end; it returns the child's id.
func (g *guarded) localChild(t *testing.T, prompt string) string {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"name": "subagent", "arguments": map[string]any{"description": "local's own child", "prompt": prompt, "run_in_background": true}}})
	b, _ := json.Marshal(g.ms.HandleMessage(edge.WithPrincipal(g.ctx, "local"), req))
	var res struct {
		Result struct {
			Structured struct {
				AgentID string `json:"agent_id"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &res); err != nil || res.Result.Structured.AgentID == "" {
		t.Fatalf("starting local's child: %s", b)
	}
	id := res.Result.Structured.AgentID
	if !waitFor(10*time.Second, func() bool {
		rows, _ := g.mgr.ListDescendants(seam.ParentRef{Principal: "local"})
		for _, r := range rows {
			if r.ID == id && r.Status != "running" {
				return true
			}
		}
		return false
	}) {
		t.Fatal("local's child never ended its first turn")
	}
	return id
}

// probe is one request to a route: its method, URL, body and headers.
// A POST of a browser page carries the page's Origin; /mcp's probes send
// none (as a client that is no browser, or a browser's GET), so they meet
// the Host check alone and not also /mcp's Origin check.
type probe struct {
	name, method, url, body string
	header                  map[string]string
	noOrigin                bool
}

// do sends p with Host host (and, for a POST, Origin http://host, as a
// browser page of that host sends); it returns the status and the body
// (of an event stream, its first line: it is not read to its end).
func (p probe) do(t *testing.T, host string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, p.method, p.url, strings.NewReader(p.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if p.method == http.MethodPost && !p.noOrigin {
		req.Header.Set("Origin", "http://"+host)
	}
	for k, v := range p.header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	defer res.Body.Close()
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		line, _ := bufio.NewReader(res.Body).ReadString('\n')
		return res.StatusCode, line
	}
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	return res.StatusCode, string(b)
}

// hostOf is u's host:port.
func hostOf(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return pu.Host
}

const refusedHost = "is not this server's name"

// DNS rebinding: a page on a name that resolves to 127.0.0.1 reaches the
// loopback listeners with its own name as Host (and Origin). Every route
// of every loopback listener (serve --http's /mcp, /view/url, the view
// under /view/, anything else; the ui listener; the callback listener)
// must refuse it, even with valid credentials; with the Host check off the
// same requests reach the routes, as the loopback names' do.
func TestEveryLoopbackRouteRefusesAnotherHost(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	for _, check := range []bool{true, false} {
		g := newGuarded(t, fake, insecureHooks{anyHost: !check})
		id := g.localChild(t, "work")
		vt, err := g.web.view.Token("local")
		if err != nil {
			t.Fatal(err)
		}
		ui, err := g.web.url("local")
		if err != nil {
			t.Fatal(err)
		}
		uiBase := strings.TrimSuffix(strings.Split(ui.URL, "?")[0], "/")
		ctx, stop := context.WithCancel(context.Background())
		cbURL, cbDone, err := serveCallbacks(ctx, g.ms, g.ts, HTTPConfig{}, !check, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop(); <-cbDone })
		cb, revoke := g.ts.MintCallback(seam.ParentRef{Principal: "local", AgentID: id, Depth: 1, Cwd: t.TempDir()})
		t.Cleanup(revoke)
		bearer := map[string]string{"Authorization": "Bearer " + g.token}
		mcpPost := map[string]string{"Authorization": "Bearer " + g.token, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
		cbPost := map[string]string{"Authorization": "Bearer " + cb.Token, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
		jsonPost := map[string]string{"Content-Type": "application/json"}
		send := `{"id":"` + id + `","message":"hello"}`
		// A task method: the tasks layer answers it itself, never reaching
		// mcp-go's streamable server and its own Host check.
		taskCall := `{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"task-none"}}`
		routes := []probe{
			{"serve --http POST /mcp", http.MethodPost, g.base + "/mcp", initBody, mcpPost, true},
			{"serve --http POST /mcp tasks/get (the tasks layer answers it)", http.MethodPost, g.base + "/mcp", taskCall, mcpPost, true},
			{"serve --http GET /view/url", http.MethodGet, g.base + "/view/url", "", bearer, false},
			{"serve --http GET /view/ (the page)", http.MethodGet, g.base + "/view/?token=" + vt, "", nil, false},
			{"serve --http GET /view/assets/app.js", http.MethodGet, g.base + "/view/assets/app.js", "", nil, false},
			{"serve --http GET /view/api/tree", http.MethodGet, g.base + "/view/api/tree?token=" + vt, "", nil, false},
			{"serve --http GET /view/api/transcript", http.MethodGet, g.base + "/view/api/transcript?token=" + vt + "&id=" + id, "", nil, false},
			{"serve --http POST /view/api/send", http.MethodPost, g.base + "/view/api/send?token=" + vt, send, jsonPost, false},
			{"serve --http POST /view/api/interrupt", http.MethodPost, g.base + "/view/api/interrupt?token=" + vt, `{"id":"` + id + `"}`, jsonPost, false},
			{"serve --http GET /elsewhere", http.MethodGet, g.base + "/elsewhere", "", bearer, false},
			{"ui GET / (the page)", http.MethodGet, uiBase + "/?token=" + vt, "", nil, false},
			{"ui GET /api/tree", http.MethodGet, uiBase + "/api/tree?token=" + vt, "", nil, false},
			{"ui POST /api/send", http.MethodPost, uiBase + "/api/send?token=" + vt, send, jsonPost, false},
			{"callbacks POST /mcp", http.MethodPost, cbURL, initBody, cbPost, true},
		}
		for _, p := range routes {
			own := hostOf(t, p.url)
			_, port, _ := net.SplitHostPort(own)
			good, _ := p.do(t, own)
			evil, body := p.do(t, "evil.example:"+port)
			switch {
			case good == http.StatusForbidden || good == http.StatusUnauthorized:
				t.Errorf("%s with the loopback Host: %d; the probe's credentials do not work", p.name, good)
			case check && (evil != http.StatusForbidden || !strings.Contains(body, refusedHost)):
				t.Errorf("%s with Host evil.example: %d %q; want 403 naming the Host", p.name, evil, body)
			case !check && evil != good:
				t.Errorf("Host check off: %s with Host evil.example: %d, want %d as with the loopback Host: the probe does not reach the route", p.name, evil, good)
			}
		}
	}
}

// The view's Origin check on a loopback listener compares with the
// listener's names: a page on a rebound name sends its own name as Origin
// and Host alike, which the old check (Origin == Host) let through.
func TestTheViewComparesTheOriginWithTheListenersNames(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	g := newGuarded(t, fake, insecureHooks{})
	id := g.localChild(t, "work")
	vt, _ := g.web.view.Token("local")
	own := hostOf(t, g.base)
	_, port, _ := net.SplitHostPort(own)
	for origin, want := range map[string]int{
		"http://" + own:                   http.StatusOK,
		"http://localhost:" + port:        http.StatusOK,
		"http://evil.example:" + port:     http.StatusForbidden,
		"http://localhost:1":              http.StatusForbidden,
		"https://evil.example":            http.StatusForbidden,
		"http://127.0.0.1.nip.io:" + port: http.StatusForbidden,
	} {
		p := probe{"send", http.MethodPost, g.base + "/view/api/send?token=" + vt, `{"id":"` + id + `","message":"hi"}`,
			map[string]string{"Content-Type": "application/json", "Origin": origin}, false}
		if got, body := p.do(t, own); got != want {
			t.Errorf("POST send with Origin %q: %d %q, want %d", origin, got, body, want)
		}
	}
}

// The attack whole: a page on a rebound name asks GET /view/url,
// then reads local's transcript and sends to its child. Either protection
// stops it (the Host check; the token tokenless --http now requires); with
// both off the same steps succeed, so the probe is real.
func TestARebindingPageCannotTakeTheView(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	for _, tc := range []struct {
		name  string
		hooks insecureHooks
		want  int // GET /view/url's status
	}{
		{"both protections", insecureHooks{}, http.StatusForbidden},
		{"the Host check alone", insecureHooks{anonymous: true}, http.StatusForbidden},
		{"the token alone", insecureHooks{anyHost: true}, http.StatusUnauthorized},
		{"neither (the probe works)", insecureHooks{anyHost: true, anonymous: true}, http.StatusOK},
	} {
		g := newGuarded(t, fake, tc.hooks)
		id := g.localChild(t, "the secret plan")
		_, port, _ := net.SplitHostPort(hostOf(t, g.base))
		evil := "evil.example:" + port
		code, line := probe{"view url", http.MethodGet, g.base + "/view/url", "", nil, false}.do(t, evil)
		if code != tc.want {
			t.Errorf("%s: GET /view/url from the rebound page: %d %q, want %d", tc.name, code, line, tc.want)
			continue
		}
		if code != http.StatusOK {
			continue
		}
		var vu uiResult
		if err := json.Unmarshal([]byte(line), &vu); err != nil {
			t.Fatalf("%s: /view/url answered %q", tc.name, line)
		}
		q, _ := url.Parse(vu.URL)
		vt := q.Query().Get("token")
		_, head := probe{"transcript", http.MethodGet, g.base + "/view/api/transcript?token=" + vt + "&id=" + id, "", nil, false}.do(t, evil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/view/api/transcript?token="+vt+"&id="+id, nil)
		req.Host = evil
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		read := false
		for !read && sc.Scan() {
			read = strings.Contains(sc.Text(), "the secret plan")
		}
		res.Body.Close()
		cancel()
		if !read {
			t.Errorf("%s: the rebound page did not read local's transcript (first line %q): the probe is broken", tc.name, head)
		}
		sent, body := probe{"send", http.MethodPost, g.base + "/view/api/send?token=" + vt, `{"id":"` + id + `","message":"do my bidding"}`,
			map[string]string{"Content-Type": "application/json"}, false}.do(t, evil)
		if sent != http.StatusOK {
			t.Errorf("%s: the rebound page's send: %d %q; the probe is broken", tc.name, sent, body)
		}
	}
}

// A DELETE without a bearer token ends a session only when it names one
// this server knows (mcp-go's client sends no headers on its closing
// DELETE); any other tokenless request is still 401.
func TestATokenlessDeleteEndsOnlyAKnownSession(t *testing.T) {
	ts, ms, _ := toolsServer(t, nil)
	hc := HTTPConfig{Tokens: []TokenConfig{{Principal: "local", Token: "local-token-0123456789"}}}
	h, streamable := httpHandler(ms, ts, hc, slog.New(slog.DiscardHandler), nil)
	t.Cleanup(func() { _ = streamable.Shutdown(context.Background()) })
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	c := connect(t, hs.URL+"/mcp", map[string]string{"Authorization": "Bearer local-token-0123456789"})
	id := c.GetSessionId()
	del := func(session string) int {
		req, _ := http.NewRequest(http.MethodDelete, hs.URL+"/mcp", nil)
		req.Header.Set("Mcp-Session-Id", session)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := del("mcp-session-unknown"); code != http.StatusUnauthorized {
		t.Errorf("tokenless DELETE of an unknown session: %d, want 401", code)
	}
	if _, ok := ts.SessionPrincipal(id); !ok {
		t.Fatalf("the client's session %q is unknown to the tools", id)
	}
	if code := del(id); code != http.StatusOK {
		t.Errorf("tokenless DELETE of the client's own session: %d, want 200", code)
	}
	if ts.SessionConnected(id) {
		t.Error("the session is still connected after its DELETE")
	}
}
