//go:build browser

package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-subagent/mcp-subagent/manager"
)

// The web view served by instance B of two serve --http instances on one
// PostgreSQL database, in a real browser, for a child started at (and
// owned by) A: B's tree lists it running while A's turn is held; its
// transcript at B shows the turn, and what A journals meanwhile arrives
// live; a message sent from B's send box is forwarded to A, where the
// model receives it as the child's next turn; B's interrupt button stops
// that turn at A; the row then settles live, without a reload. Without
// its token B's view shows and answers nothing; with it, the same
// requests do.
func TestWebViewAtAnotherInstance(t *testing.T) {
	db := pgURL(t)
	first, second := newGate(), newGate()
	fake := newHeldModel(t, map[string]*releaseGate{"HOLD view": first, "HOLD interrupt": second})
	a, b := clusterInstance(t, fake.Server, db), clusterInstance(t, fake.Server, db)
	ctx := testCtx(t)
	br := browser(t)

	h, _ := startBackground(t, a, ctx, "held at A", "HOLD view")
	if !waitFor(10*time.Second, func() bool { return fake.count("HOLD view") == 1 }) {
		t.Fatal("the child never called the model")
	}
	id := h.AgentID

	// B's view URL, for alice's bearer token only.
	if code, _ := viewURLAt(t, b, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /view/url at B without a bearer token: %d, want 401", code)
	}
	code, page := viewURLAt(t, b, aliceTok)
	base := strings.TrimSuffix(b.url, "/mcp") + "/view/"
	if code != http.StatusOK || !strings.HasPrefix(page, base+"?token=") {
		t.Fatalf("GET /view/url at B = %d %q; want a URL under %s", code, page, base)
	}
	pu, _ := url.Parse(page)
	tok := pu.Query().Get("token")

	// Without the token B's view refuses; with it the same requests are
	// answered, and the tree lists A's child with A's status.
	for _, p := range []string{"api/tree", "api/transcript?id=" + id} {
		for _, bad := range []string{"", "wrong-" + tok} {
			if got := statusOf(t, base+p, bad); got != http.StatusUnauthorized && got != http.StatusForbidden {
				t.Errorf("GET %s at B with token %q: %d, want 401 or 403", p, bad, got)
			}
		}
		if got := statusOf(t, base+p, tok); got != http.StatusOK {
			t.Errorf("GET %s at B with its token: %d, want 200", p, got)
		}
	}
	if rows := treeSnapshot(t, ctx, page); len(rows) != 1 || rows[0].ID != id || rows[0].Status != manager.StatusRunning {
		t.Errorf("B's tree with the token = %+v; want %s running (at A)", rows, id)
	}
	step(t, br, 20*time.Second, "B's page without its token", chromedp.Navigate(base))
	if body := evalJS[string](t, br, `document.body.innerText`); !strings.Contains(body, "token required") || strings.Contains(body, id) {
		t.Errorf("without the token B's page shows %q", body)
	}
	if n := evalJS[int](t, br, `document.querySelectorAll(".row").length`); n != 0 {
		t.Errorf("without the token B's page lists %d rows", n)
	}

	// 1. The tree at B: A's child, running while A's turn is held.
	step(t, br, 20*time.Second, "B's page", chromedp.Navigate(page))
	until(t, br, 20*time.Second, "A's child is listed running at B", `document.querySelector(`+q(row(id, "running"))+`) !== null`)
	until(t, br, 5*time.Second, "marking the page", `(window.__loaded = true)`)

	// 2. Its transcript at B: the held turn's prompt.
	step(t, br, 10*time.Second, "opening the child at B", chromedp.Click(chromedp.CSS(row(id, ""))))
	until(t, br, 20*time.Second, "its transcript opens running, with the turn's prompt", `document.querySelector('#dstatus').dataset.status === "running" &&
		[...document.querySelectorAll('#entries li[data-kind="user"]')].some(e => e.innerText.includes("HOLD view"))`)

	// 3a. The send box at B: the message is forwarded to A, the owner.
	step(t, br, 10*time.Second, "sending from B", chromedp.SendKeys(chromedp.CSS("#message"), "HOLD interrupt"), chromedp.Click(chromedp.CSS("#send")))
	until(t, br, 20*time.Second, "the send is acknowledged as forwarded", `document.querySelector('#actionresult').innerText.includes("sent (forwarded)")`)

	// 2. A ends the held turn and runs the forwarded message: what A
	// journals arrives in B's open transcript.
	first.open()
	until(t, br, 30*time.Second, "A's answer arrives live at B", `[...document.querySelectorAll('#entries li[data-kind="assistant"]')].some(e => e.innerText.includes("answer to HOLD view"))`)
	until(t, br, 30*time.Second, "A's next turn (the message sent at B) arrives live", `[...document.querySelectorAll('#entries li[data-kind="user"]')].some(e => e.innerText.includes("HOLD interrupt"))`)
	if !waitFor(20*time.Second, func() bool { return fake.count("HOLD interrupt") == 1 }) {
		t.Fatalf("the message sent from B's view never reached the model; A's log:\n%s", linesWith(a.stderr.String(), id))
	}
	if strings.Contains(b.stderr.String(), `"msg":"subagent resumed"`) {
		t.Errorf("the message sent from B's view ran at B, not at A (its owner):\n%s", linesWith(b.stderr.String(), id))
	}

	// 3b. B's interrupt button stops the turn at A.
	until(t, br, 20*time.Second, "the interrupt button is on", `!document.querySelector('#interrupt').disabled`)
	step(t, br, 10*time.Second, "interrupting from B", chromedp.Click(chromedp.CSS("#interrupt")))
	until(t, br, 10*time.Second, "the interrupt is acknowledged", `document.querySelector('#actionresult').innerText.includes("interrupt requested")`)
	want := `"msg":"subagent interrupted at another instance's request"`
	if !waitFor(20*time.Second, func() bool { return strings.Contains(linesWith(a.stderr.String(), id), want) }) {
		t.Fatalf("A never interrupted the child at B's request; A's log of it:\n%s", linesWith(a.stderr.String(), id))
	}
	until(t, br, 30*time.Second, "the interrupted turn's end arrives at B", `[...document.querySelectorAll('#entries li[data-kind="turn-end"]')].some(e => e.innerText.includes("aborted"))`)
	if !waitFor(20*time.Second, func() bool {
		_, rows := callList(t, a, ctx, nil)
		r, ok := rowOf(rows, id)
		return ok && r.Status != manager.StatusRunning && r.LastStopReason == "aborted"
	}) {
		_, rows := callList(t, a, ctx, nil)
		t.Fatalf("A lists %+v; want the child's turn aborted", rows)
	}

	// 1. The row at B settles live, the page never reloaded.
	until(t, br, 30*time.Second, "the child's row at B settles", `document.querySelector(`+q(row(id, "ready"))+`) !== null`)
	if !evalJS[bool](t, br, `window.__loaded === true`) {
		t.Error("B's page reloaded")
	}
	if n := fake.count("HOLD interrupt"); n != 1 {
		t.Errorf("the interrupted turn reached the model %d times; want once", n)
	}
	screenshot(t, br, "view-at-another-instance")
}

// statusOf is the status code of a GET of u with token as its view token
// ("": none); the body is left unread.
func statusOf(t *testing.T, u, token string) int {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		q := pu.Query()
		q.Set("token", token)
		pu.RawQuery = q.Encode()
	}
	res, err := http.Get(pu.String())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}
