package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/anthropic"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

func userRequest(text string) llm.Request {
	return llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

// testIdle is the stream idle timeout of these tests: short, so a stall
// is cut in a moment; long enough that a fake on a loaded machine is not
// taken for stalled between two events.
const testIdle = 300 * time.Millisecond

// bounded runs complete and fails the test if it has not returned within
// a bound far above what the test waits for: on code that never cuts a
// stalled stream, complete would hang.
func bounded(t *testing.T, complete func() (llm.Response, error)) (llm.Response, error) {
	t.Helper()
	type result struct {
		resp llm.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := complete()
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Complete did not return in 30s: the stalled stream was never cut")
		return llm.Response{}, nil
	}
}

// A stream that stalls (events, then nothing, the connection open) is
// cut after the idle timeout and retried as a broken stream; with no
// retries left, the error says why. OpenAI and Anthropic alike.
func TestStalledStreamIsCutAndRetried(t *testing.T) {
	type backend struct {
		name string
		// client is a client of a fake whose first answer stalls after a
		// few events and the next answers "recovered"; requests counts
		// the requests it got.
		client func(t *testing.T, maxRetries int) (c llm.Client, requests func() int)
	}
	backends := []backend{
		{"openai", func(t *testing.T, maxRetries int) (llm.Client, func() int) {
			srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "a long answer that stalls", StallAfter: 2}, fakeopenai.Reply{Text: "recovered"}))
			t.Cleanup(srv.Close)
			c := openai.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxRetries: maxRetries,
				RetryBaseDelay: time.Millisecond, StreamIdleTimeout: testIdle})
			return c, func() int { return len(srv.Requests()) }
		}},
		{"anthropic", func(t *testing.T, maxRetries int) (llm.Client, func() int) {
			srv := fakeanthropic.New(fakeanthropic.Script(fakeanthropic.Reply{Text: "a long answer that stalls", StallAfter: 2}, fakeanthropic.Reply{Text: "recovered"}))
			t.Cleanup(srv.Close)
			c := anthropic.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxRetries: maxRetries,
				RetryBaseDelay: time.Millisecond, StreamIdleTimeout: testIdle})
			return c, func() int { return len(srv.Requests()) }
		}},
	}
	for _, b := range backends {
		t.Run(b.name+": retried", func(t *testing.T) {
			c, requests := b.client(t, 2)
			resp, err := bounded(t, func() (llm.Response, error) {
				return c.Complete(context.Background(), userRequest("hi"), nil)
			})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Message.Content != "recovered" || requests() != 2 {
				t.Fatalf("got %q after %d requests, want the retry's %q after 2", resp.Message.Content, requests(), "recovered")
			}
		})
		t.Run(b.name+": no retries left", func(t *testing.T) {
			c, _ := b.client(t, -1)
			_, err := bounded(t, func() (llm.Response, error) {
				return c.Complete(context.Background(), userRequest("hi"), nil)
			})
			var e *transport.Error
			if !errors.As(err, &e) || !e.Retryable || !strings.Contains(e.Message, "no event from the server for 300ms") {
				t.Fatalf("err = %v, want a retryable *transport.Error naming the idle timeout", err)
			}
			if errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v: a stall is not a cancellation", err)
			}
		})
	}
}

// The caller's cancellation during a stall is a cancellation, not a stall.
func TestCancelDuringAStallIsACancellation(t *testing.T) {
	srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: "stalls", StallAfter: 1}))
	t.Cleanup(srv.Close)
	c := openai.New(transport.Config{BaseURL: srv.URL(), Model: "m", StreamIdleTimeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := bounded(t, func() (llm.Response, error) { return c.Complete(ctx, userRequest("hi"), nil) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// An Anthropic server that sends the whole answer but never ends the body
// is not waited for past a moment: the answer is whole at message_stop.
func TestAnthropicAnswerWholeAtMessageStop(t *testing.T) {
	srv := fakeanthropic.New(fakeanthropic.Script(fakeanthropic.Reply{Text: "done", HoldOpen: true}))
	t.Cleanup(srv.Close)
	c := anthropic.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxRetries: -1, StreamIdleTimeout: time.Hour})
	resp, err := bounded(t, func() (llm.Response, error) { return c.Complete(context.Background(), userRequest("hi"), nil) })
	if err != nil || resp.Message.Content != "done" || resp.FinishReason != llm.FinishStop {
		t.Fatalf("got %+v, %v; want the answer \"done\"", resp, err)
	}
}

// An answer past the output bound is cut there: the rest is not read, and
// it ends FinishLength with OutputLimit set, text and tool arguments
// alike, OpenAI and Anthropic alike; a cut never splits a character.
func TestAnswerPastTheOutputBoundIsCut(t *testing.T) {
	const limit = 1001
	// 101 bytes a piece: the bound falls inside the 46th "é" of the 10th.
	piece := "a" + strings.Repeat("é", 50)
	tests := []struct {
		name   string
		client func(t *testing.T) llm.Client
		calls  bool
	}{
		{"openai text", func(t *testing.T) llm.Client {
			srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{Text: piece, Repeat: 1000}))
			t.Cleanup(srv.Close)
			return openai.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxOutputBytes: limit})
		}, false},
		{"openai tool arguments", func(t *testing.T) llm.Client {
			args := `{"content":"` + strings.Repeat("x", 100_000) + `"}`
			srv := fakeopenai.New(fakeopenai.Script(fakeopenai.Reply{ToolCalls: []fakeopenai.ToolCall{{Name: "write", Arguments: args}}}))
			t.Cleanup(srv.Close)
			return openai.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxOutputBytes: limit})
		}, true},
		{"anthropic text", func(t *testing.T) llm.Client {
			srv := fakeanthropic.New(fakeanthropic.Script(fakeanthropic.Reply{Text: piece, Repeat: 1000}))
			t.Cleanup(srv.Close)
			return anthropic.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxOutputBytes: limit})
		}, false},
		{"anthropic tool arguments", func(t *testing.T) llm.Client {
			in := map[string]any{"content": strings.Repeat("x", 100_000)}
			srv := fakeanthropic.New(fakeanthropic.Script(fakeanthropic.Reply{ToolUses: []fakeanthropic.ToolUse{{Name: "write", Input: in}}}))
			t.Cleanup(srv.Close)
			return anthropic.New(transport.Config{BaseURL: srv.URL(), Model: "m", MaxOutputBytes: limit})
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := bounded(t, func() (llm.Response, error) {
				return tc.client(t).Complete(context.Background(), userRequest("hi"), nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.FinishReason != llm.FinishLength || resp.OutputLimit != limit {
				t.Fatalf("finish %s, OutputLimit %d; want length, %d", resp.FinishReason, resp.OutputLimit, limit)
			}
			size := len(resp.Message.Content)
			for _, c := range resp.Message.ToolCalls {
				size += len(c.Name) + len(c.Arguments)
			}
			if size > limit || size < limit-4 {
				t.Fatalf("the answer kept %d bytes, want the bound's %d (less a split character)", size, limit)
			}
			if tc.calls != (len(resp.Message.ToolCalls) == 1) {
				t.Fatalf("tool calls = %+v", resp.Message.ToolCalls)
			}
			if !tc.calls && (!strings.HasPrefix(resp.Message.Content, piece+piece) || !utf8.ValidString(resp.Message.Content)) {
				t.Fatalf("the text is not what was streamed, cut between characters: %q", resp.Message.Content)
			}
			if resp.Usage.OutputTokens < int64(size/4) {
				t.Fatalf("output tokens %d, want at least a token per 4 bytes read (%d)", resp.Usage.OutputTokens, size/4)
			}
		})
	}
}
