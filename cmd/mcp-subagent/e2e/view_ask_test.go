//go:build browser

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// An in-process child under spawn.permission "ask" asks the person a
// question (ask_user); in a real browser the view shows it asking, the
// open child shows the question, and the answer typed there reaches the
// child as the tool's result, its turn then completing live.
func TestWebViewAnswersAQuestion(t *testing.T) {
	fake := fakeopenai.New(func(_ int, req fakeopenai.Request) fakeopenai.Reply {
		if !strings.Contains(req.LastUserText(), "ASK-USER") {
			return fakeopenai.Reply{Text: "nothing to do"}
		}
		if res, ok := req.LastToolResult(); ok {
			return fakeopenai.Reply{Text: "GOT: " + res}
		}
		return fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "ask_user", Arguments: `{"question":"Which colour should the logo be?"}`}}}
	})
	t.Cleanup(fake.Close)
	ctx := browser(t)
	s := start(t, fake, serverOpts{config: `{"spawn": {"permission": "ask", "question_timeout_seconds": 120}}`})
	h, _ := startBackground(t, s, testCtx(t), "asker", "ASK-USER pick the logo's colour")

	step(t, ctx, 20*time.Second, "the page", chromedp.Navigate(uiURL(t, s)))
	until(t, ctx, 30*time.Second, "the child reads input_required", `document.querySelector(`+q(row(h.AgentID, "input_required"))+`) !== null`)
	if sum := evalJS[string](t, ctx, `document.querySelector("#summary").innerText`); !strings.Contains(sum, "1 asking you") {
		t.Errorf("summary %q", sum)
	}
	step(t, ctx, 10*time.Second, "opening the child", chromedp.Click(chromedp.CSS(row(h.AgentID, ""))))
	until(t, ctx, 10*time.Second, "its question shows", `!document.querySelector("#questions").hidden &&
		document.querySelector("#qlist").innerText.includes("Which colour should the logo be?")`)
	screenshot(t, ctx, "view-question")
	step(t, ctx, 10*time.Second, "answering", chromedp.SendKeys(chromedp.CSS("#qlist input.answertext"), "teal"),
		chromedp.Click(chromedp.CSS("#qlist button.answer")))
	until(t, ctx, 20*time.Second, "the answer is acknowledged", `document.querySelector('#actionresult').innerText.includes("answered question q-")`)
	until(t, ctx, 30*time.Second, "the child completes live", `document.querySelector(`+q(row(h.AgentID, "ready"))+`) !== null && document.querySelector("#questions").hidden`)
	until(t, ctx, 30*time.Second, "its closing message has the answer",
		`[...document.querySelectorAll('#entries li[data-kind="assistant"]')].some(e => e.innerText.includes("GOT: The person answered: teal"))`)
}
