//go:build browser

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/internal/seed"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/seam"
	"github.com/mcp-subagent/mcp-subagent/view"
)

// chromiumPath is the headless browser the web view's tests drive:
// $MCP_SUBAGENT_CHROMIUM, else Debian's chromium on PATH. Missing, the
// tests skip, except under CI (CI=true), where .ci/run installs it and a
// missing browser must fail them.
func chromiumPath(t *testing.T) string {
	t.Helper()
	name := os.Getenv("MCP_SUBAGENT_CHROMIUM")
	if name == "" {
		name = "chromium"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("no %s to drive the web view (install Debian's chromium: apt-get install -y chromium, or set MCP_SUBAGENT_CHROMIUM): %v", name, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// browser starts a headless Chromium for the test (a fresh profile, and
// none of the background traffic it would send to a network that is not
// there) and returns a tab's context; it is stopped when the test ends.
func browser(t *testing.T) context.Context {
	t.Helper()
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 820),
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	// The first Run starts the browser; its context must not time out.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// step runs browser actions within d, failing the test with what the page
// shows when they do not complete.
func step(t *testing.T, ctx context.Context, d time.Duration, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 3000) : ""`))
		t.Fatalf("%s: %v\nthe page shows:\n%s", what, err, body)
	}
}

// until waits (bounded) for a JavaScript predicate to hold on the page: the
// browser re-evaluates it on every frame, so the wait ends on the DOM
// change itself.
func until(t *testing.T, ctx context.Context, d time.Duration, what, js string) {
	t.Helper()
	step(t, ctx, d+time.Second, what, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[bool](js, chromedp.WithPollingTimeout(d))(ctx, tg)
		return chromedp.Void{}, err
	})
}

func evalJS[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// screenshot saves the page as NAME.png to $MCP_SUBAGENT_ARTIFACTS (else
// the test's temporary directory) and logs where.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MCP_SUBAGENT_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// row is the selector of a child's row, optionally with its status.
func row(id, status string) string {
	sel := `.row[data-id="` + id + `"]`
	if status != "" {
		sel += `[data-status="` + status + `"]`
	}
	return sel
}

func q(sel string) string { return strconv.Quote(sel) }

// The web view in a real browser, on the daemon of children an MCP client
// started: the tree with statuses as text and the grandchild nested; a
// held child's status changes live to settled; a transcript labels the
// child's own words, its child's report, the runtime's notice and tool
// calls apart; the interrupt button stops a running child; the send box
// sends it its next turn; without the token the page shows nothing.
func TestWebView(t *testing.T) {
	model, fake, release := newCLIModel(t)
	ctx := browser(t)
	s := start(t, fake, serverOpts{})
	mctx := testCtx(t)
	del, initial := startBackground(t, s, mctx, "delegator", "delegate")
	got := awaitNotices(t, s, mctx, 30*time.Second, initial, func(ns []string) bool {
		return countWith(ns, "[subagent-settled from "+del.AgentID+"]") == 1
	})
	if countWith(got, "[subagent-settled from "+del.AgentID+"]") != 1 {
		t.Fatalf("the delegator never settled; notices %q", got)
	}
	watched, _ := startBackground(t, s, mctx, "watched", "watch me")
	<-model.holding

	u := uiURL(t, s)
	if again := uiURL(t, s); again != u {
		t.Errorf("a second ui printed %q, want the same URL %q", again, u)
	}
	pu, _ := url.Parse(u)
	base := pu.Scheme + "://" + pu.Host + "/"

	// Without the token: a plain page and no data, and the API refuses.
	step(t, ctx, 20*time.Second, "the page without its token", chromedp.Navigate(base))
	if body := evalJS[string](t, ctx, `document.body.innerText`); !strings.Contains(body, "token required") ||
		strings.Contains(body, del.AgentID) || strings.Contains(body, watched.AgentID) {
		t.Errorf("without the token the page shows %q", body)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll(".row").length`); n != 0 {
		t.Errorf("without the token the page lists %d rows", n)
	}
	for _, p := range []string{"api/tree", "api/tree?token=wrong", "api/transcript?id=" + del.AgentID} {
		res, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s without a valid token: %d, want 401 or 403", p, res.StatusCode)
		}
	}

	// The tree: both children and the grandchild under its parent, each
	// status in words.
	step(t, ctx, 20*time.Second, "the page", chromedp.Navigate(u))
	until(t, ctx, 20*time.Second, "the tree renders", `document.querySelector(`+q(row(watched.AgentID, "running"))+`) !== null &&
		document.querySelector(`+q(row(del.AgentID, "ready"))+`) !== null`)
	if st := evalJS[string](t, ctx, `document.querySelector(`+q(row(watched.AgentID, "")+" .status")+`).innerText`); !strings.Contains(st, "running") {
		t.Errorf("the held child's status reads %q, want the word running", st)
	}
	grand := evalJS[string](t, ctx, `(() => { const li = document.querySelector('li[data-id="`+del.AgentID+`"] > ul > li'); return li ? li.dataset.id + " " + li.innerText : "" })()`)
	if !strings.Contains(grand, "grand work") {
		t.Errorf("the grandchild is not nested under its parent: %q", grand)
	}
	delRow := evalJS[string](t, ctx, `document.querySelector(`+q(row(del.AgentID, ""))+`).innerText`)
	for _, want := range []string{"delegator", "spawn", "d1", " in / ", "completed"} {
		if !strings.Contains(delRow, want) {
			t.Errorf("the delegator's row %q lacks %q", delRow, want)
		}
	}
	screenshot(t, ctx, "view-tree")

	// Live: released, the held child settles and its row says so, without
	// a reload.
	until(t, ctx, 5*time.Second, "marking the page", `(window.__loaded = true)`)
	release()
	until(t, ctx, 30*time.Second, "the held child's row turns ready", `document.querySelector(`+q(row(watched.AgentID, "ready"))+`) !== null`)
	if !evalJS[bool](t, ctx, `window.__loaded === true`) {
		t.Error("the page reloaded")
	}

	// The delegator's transcript: source kinds apart, in words and style.
	step(t, ctx, 10*time.Second, "opening the delegator", chromedp.Click(chromedp.CSS(row(del.AgentID, ""))))
	until(t, ctx, 20*time.Second, "the transcript shows every kind", `["user", "assistant", "tool-call", "tool-result", "subagent-report", "subagent-settled", "turn-end"]
		.every(k => document.querySelector('#entries li[data-kind="' + k + '"]') !== null)`)
	report := evalJS[string](t, ctx, `document.querySelector('#entries li[data-kind="subagent-report"]').innerText`)
	if !strings.Contains(report, "subagent-report") || !strings.Contains(report, "halfway there") {
		t.Errorf("the report entry reads %q", report)
	}
	notice := evalJS[string](t, ctx, `document.querySelector('#entries li[data-kind="subagent-settled"]').innerText`)
	if !strings.Contains(notice, "subagent-settled") || !strings.Contains(notice, "finished and will do no further work") {
		t.Errorf("the notice entry reads %q", notice)
	}
	styles := evalJS[[]string](t, ctx, `["assistant", "subagent-report", "subagent-settled", "tool-call", "user"].map(k =>
		getComputedStyle(document.querySelector('#entries li[data-kind="' + k + '"]')).borderLeftColor)`)
	for i := range styles {
		for j := i + 1; j < len(styles); j++ {
			if styles[i] == styles[j] {
				t.Errorf("source kinds %d and %d look alike: %q", i, j, styles)
			}
		}
	}
	if own := evalJS[string](t, ctx, `[...document.querySelectorAll('#entries li[data-kind="assistant"]')].map(e => e.innerText).join("\n")`); strings.Contains(own, "halfway there") {
		t.Errorf("the report is shown as the child's own words: %q", own)
	}
	screenshot(t, ctx, "view-transcript")

	// The grandchild: only its parent (the delegator) may steer it, so its
	// buttons are off.
	gid := evalJS[string](t, ctx, `document.querySelector('li[data-id="`+del.AgentID+`"] > ul > li').dataset.id`)
	step(t, ctx, 10*time.Second, "opening the grandchild", chromedp.Click(chromedp.CSS(row(gid, ""))))
	until(t, ctx, 20*time.Second, "its transcript, not steerable", `document.querySelector('#entries li[data-kind="subagent-report"]') === null &&
		document.querySelector('#entries li[data-kind="tool-call"]') !== null &&
		document.querySelector('#send').disabled && document.querySelector('#interrupt').disabled`)

	// The interrupt button stops a running child; the view shows its turn
	// ending, and the daemon's listing agrees.
	slow, _ := startBackground(t, s, mctx, "slow", "long task")
	until(t, ctx, 30*time.Second, "the slow child appears running", `document.querySelector(`+q(row(slow.AgentID, "running"))+`) !== null`)
	if !waitFor(10*time.Second, func() bool {
		return len(requestsWhere(fake, func(r fakeopenai.Request) bool { return r.LastUserText() == "long task" })) == 1
	}) {
		t.Fatal("the slow child never called the model")
	}
	step(t, ctx, 10*time.Second, "opening the slow child", chromedp.Click(chromedp.CSS(row(slow.AgentID, ""))))
	until(t, ctx, 20*time.Second, "its transcript opens running", `document.querySelector('#dstatus').dataset.status === "running" &&
		document.querySelector('#entries li[data-kind="user"]') !== null`)
	step(t, ctx, 10*time.Second, "interrupting", chromedp.Click(chromedp.CSS("#interrupt")))
	until(t, ctx, 30*time.Second, "the interrupted turn ends in the transcript", `[...document.querySelectorAll('#entries li[data-kind="turn-end"]')].some(e => e.innerText.includes("aborted"))`)
	until(t, ctx, 30*time.Second, "the slow child's row stops running", `document.querySelector(`+q(row(slow.AgentID, "running"))+`) === null`)
	_, out, _ := cli(t, s, "ls", "--json")
	var rows []manager.Row
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("ls --json: %v: %s", err, out)
	}
	for _, r := range rows {
		if r.ID == slow.AgentID && (r.Status == manager.StatusRunning || r.LastStopReason != "aborted") {
			t.Errorf("after the interrupt button ls shows %+v, want not running, last turn aborted", r)
		}
	}

	// The send box: the settled watched child gets its next turn and the
	// answer arrives in the open transcript.
	step(t, ctx, 10*time.Second, "opening the watched child", chromedp.Click(chromedp.CSS(row(watched.AgentID, ""))))
	until(t, ctx, 20*time.Second, "its transcript", `[...document.querySelectorAll('#entries li[data-kind="assistant"]')].some(e => e.innerText.includes("watched it"))`)
	step(t, ctx, 10*time.Second, "sending", chromedp.SendKeys(chromedp.CSS("#message"), "again"), chromedp.Click(chromedp.CSS("#send")))
	until(t, ctx, 20*time.Second, "the send is acknowledged", `document.querySelector('#actionresult').innerText.includes("sent (resumed)")`)
	until(t, ctx, 30*time.Second, "the answer arrives live", `[...document.querySelectorAll('#entries li[data-kind="assistant"]')].some(e => e.innerText.includes("answer to again"))`)
	screenshot(t, ctx, "view-send")
}

// A thousand children render, in creation order, and the stream's first
// event carries them all.
func TestWebViewThousandChildren(t *testing.T) {
	ctx := browser(t)
	dataDir := t.TempDir()
	st, err := persist.Open(dataDir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := seed.Children(st, seam.ParentRef{Principal: "local", Cwd: os.TempDir()}, 1000); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	s := &instance{dataDir: dataDir, workspace: t.TempDir()}
	u := uiURL(t, s)
	began := time.Now()
	step(t, ctx, 30*time.Second, "the page", chromedp.Navigate(u))
	until(t, ctx, 60*time.Second, "a thousand rows", `document.querySelectorAll(".row").length === 1000`)
	t.Logf("1,000 children rendered %v after navigation", time.Since(began).Round(time.Millisecond))
	first := evalJS[string](t, ctx, `document.querySelector(".row").dataset.id`)
	last := evalJS[string](t, ctx, `[...document.querySelectorAll(".row")].pop().dataset.id`)
	if first != fmt.Sprintf("agent-%016d", 0) || last != fmt.Sprintf("agent-%016d", 999) {
		t.Errorf("rows run %s .. %s, want creation order", first, last)
	}
	if sum := evalJS[string](t, ctx, `document.querySelector("#summary").innerText`); !strings.HasPrefix(sum, "1000 children") {
		t.Errorf("summary %q", sum)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll('.row[data-status="ready"]').length`); n != 1000 {
		t.Errorf("%d rows read ready, want 1000", n)
	}
	screenshot(t, ctx, "view-1000")
}

// Under serve --http each principal gets its view URL from GET /view/url
// with its bearer token, and its view shows only its own children.
func TestWebViewOverHTTP(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "done"}))
	defer fake.Close()
	cfg := `{"http": {"tokens": [{"token": "alice-token-0123456789", "principal": "alice"}, {"token": "bob-token-0123456789ab", "principal": "bob"}]}}`
	s := start(t, fake, serverOpts{http: true, config: cfg, token: "alice-token-0123456789"})
	ctx := testCtx(t)
	h, _ := startBackground(t, s, ctx, "alice's", "alice's work")
	base := strings.TrimSuffix(s.url, "/mcp")
	viewURL := func(token string) (int, string) { return viewURLAt(t, s, token) }
	if code, _ := viewURL(""); code != http.StatusUnauthorized {
		t.Errorf("GET /view/url without a bearer token: %d, want 401", code)
	}
	if code, _ := viewURL("mallory-token-0123456789"); code != http.StatusUnauthorized {
		t.Errorf("GET /view/url with an unknown bearer token: %d, want 401", code)
	}
	_, au := viewURL("alice-token-0123456789")
	_, bu := viewURL("bob-token-0123456789ab")
	if !strings.HasPrefix(au, base+"/view/?token=") || !strings.HasPrefix(bu, base+"/view/?token=") || au == bu {
		t.Fatalf("view URLs: alice %q, bob %q", au, bu)
	}
	snapshot := func(pageURL string) []string {
		var ids []string
		for _, r := range treeSnapshot(t, ctx, pageURL) {
			ids = append(ids, r.ID)
		}
		return ids
	}
	if ids := snapshot(au); len(ids) != 1 || ids[0] != h.AgentID {
		t.Errorf("alice's view lists %q, want only %s", ids, h.AgentID)
	}
	if ids := snapshot(bu); len(ids) != 0 {
		t.Errorf("bob's view lists %q, want none of alice's", ids)
	}
	// The page itself, in the browser, under the /view/ prefix.
	b := browser(t)
	step(t, b, 20*time.Second, "alice's page", chromedp.Navigate(au))
	until(t, b, 20*time.Second, "her child's row", `document.querySelector(`+q(row(h.AgentID, ""))+`) !== null`)
}

// viewURLAt is GET /view/url at s (serve --http) with token as the bearer
// token ("": none): its status and the view URL it answers.
func viewURLAt(t *testing.T, s *instance, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(s.url, "/mcp")+"/view/url", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		URL string `json:"url"`
	}
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out.URL
}

// treeSnapshot reads the first event (the snapshot) of the tree stream of
// the view at pageURL (with its token), failing the test unless the
// stream answers 200.
func treeSnapshot(t *testing.T, ctx context.Context, pageURL string) []view.Row {
	t.Helper()
	u, _ := url.Parse(pageURL)
	u.Path += "api/tree"
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u.Path, res.StatusCode)
	}
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the tree stream: %v", err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var snap view.Snapshot
			if err := json.Unmarshal([]byte(data), &snap); err != nil {
				t.Fatal(err)
			}
			return snap.Rows
		}
	}
}
