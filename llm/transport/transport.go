// Package transport is what the two model clients (llm/openai and
// llm/anthropic) share: the Config they take, the secret-free *Error they
// return, the retry loop with its backoff, the stream bounds (idle timeout,
// output size), the bookkeeping of one HTTP exchange that both SDKs'
// middleware feeds, and the encoded-tool cache. It imports no SDK; it is
// exported only so that the two client packages can share it.
package transport

// What both backends share: the Config, the *Error, the retry loop with its
// backoff, and the bookkeeping of one HTTP exchange (status, error body,
// Retry-After) that both SDKs' middleware feeds.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcp-subagent/mcp-subagent/llm"
)

// FinishWait is how long a stream's end is waited for after its last
// event before the body is cut.
const FinishWait = time.Second

const (
	defaultMaxRetries     = 2
	defaultRetryBaseDelay = 500 * time.Millisecond
	maxBackoff            = 30 * time.Second
	maxRetryAfter         = time.Minute
	maxErrorBody          = 64 << 10
	maxMessageLen         = 500
	// DefaultStreamIdleTimeout is Config.StreamIdleTimeout's default.
	DefaultStreamIdleTimeout = 5 * time.Minute
	// DefaultMaxOutputBytes is Config.MaxOutputBytes's default: far more
	// than any answer a model is asked for, and small enough that one
	// runaway answer cannot fill the server's memory or store.
	DefaultMaxOutputBytes = 1 << 20
)

// Config configures openai.New and anthropic.New. Zero values mean the
// documented defaults.
type Config struct {
	// BaseURL is the API root. For OpenAI it includes the version path,
	// such as "https://api.deepseek.com/v1" or "http://localhost:11434/v1"
	// (empty: openai.DefaultBaseURL); for Anthropic it does not, as the SDK takes
	// it (empty: anthropic.DefaultBaseURL).
	BaseURL string
	// APIKey is sent as a bearer token to OpenAI-compatible servers and as
	// x-api-key to Anthropic. Empty: no credential header (local servers
	// such as Ollama need none).
	APIKey string
	// Model is used when Request.Model is empty.
	Model string
	// MaxRetries is how many times a failed call is retried (HTTP 429, 5xx
	// including Anthropic's 529, transport failures, broken streams, a
	// retryable error event in the stream). Zero: 2. Negative: no retries.
	MaxRetries int
	// RetryBaseDelay is the wait before the first retry; each further retry
	// waits twice as long (capped at 30s), plus up to a quarter of jitter.
	// Zero: 500ms.
	RetryBaseDelay time.Duration
	// HTTPClient makes the requests. Nil: a client like http.DefaultClient
	// whose transport gives up on response headers after 10 minutes; there is
	// no overall timeout, since streams are long (use the context).
	HTTPClient *http.Client
	// Logger receives one warning per retry. Nil: silent.
	Logger *slog.Logger
	// StreamIdleTimeout cuts an attempt whose server sends no event for
	// this long, from the request to its first event or between two: a
	// stalled server, or a proxy that holds a dead stream open. The
	// attempt fails as a broken stream does, and is retried. Zero or
	// negative: DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration
	// MaxOutputBytes bounds one answer as it is assembled: its text,
	// refusal, and tool calls' names and arguments. At the bound the rest
	// of the stream is not read, and the answer ends with FinishLength and
	// Response.OutputLimit set. Zero: DefaultMaxOutputBytes. Negative: no
	// bound.
	MaxOutputBytes int
}

// streamLimits are the bounds on one streamed answer that both backends
// apply: how long the stream may go quiet, and how large the answer may
// grow.
type StreamLimits struct {
	idle      time.Duration
	MaxOutput int // zero: none
}

func NewStreamLimits(cfg Config) StreamLimits {
	l := StreamLimits{idle: cfg.StreamIdleTimeout, MaxOutput: cfg.MaxOutputBytes}
	if l.idle <= 0 {
		l.idle = DefaultStreamIdleTimeout
	}
	switch {
	case l.MaxOutput == 0:
		l.MaxOutput = DefaultMaxOutputBytes
	case l.MaxOutput < 0:
		l.MaxOutput = 0
	}
	return l
}

// errStreamIdle is the cause an attempt's context ends with when its
// stream went quiet for too long.
var errStreamIdle = errors.New("stream idle")

// Watchdog ends an attempt whose stream goes quiet: its context, which
// the request runs under, is cancelled (with cause errStreamIdle) once d
// passes without a tick. A cancelled request's body read fails at once,
// on HTTP/1.1 and HTTP/2 alike, which closing the body from another
// goroutine does not promise.
type Watchdog struct {
	Ctx    context.Context
	cancel context.CancelCauseFunc
	t      *time.Timer
	d      time.Duration
}

func (l StreamLimits) Watch(ctx context.Context) *Watchdog {
	w := &Watchdog{d: l.idle}
	w.Ctx, w.cancel = context.WithCancelCause(ctx)
	w.t = time.AfterFunc(w.d, func() { w.cancel(errStreamIdle) })
	return w
}

// tick says an event came: the quiet time starts again.
func (w *Watchdog) Tick() { w.t.Reset(w.d) }

// shorten makes the allowed quiet time d from now on (the answer is
// complete, and only the end of the body is awaited).
func (w *Watchdog) Shorten(d time.Duration) {
	w.d = d
	w.t.Reset(d)
}

// stalled reports whether the watchdog cut the attempt.
func (w *Watchdog) Stalled() bool { return errors.Is(context.Cause(w.Ctx), errStreamIdle) }

// failure is the stall as an attempt's failure: a broken stream, retried.
func (w *Watchdog) Failure() *Failure {
	return &Failure{Message: fmt.Sprintf("stream broken: no event from the server for %s (the stream idle timeout, llm.stream_idle_seconds)", w.d),
		Retryable: true, Cause: errStreamIdle}
}

func (w *Watchdog) Stop() {
	w.t.Stop()
	w.cancel(nil)
}

// outputBound counts the bytes of an answer against a limit (zero: none).
type OutputBound struct {
	Limit int
	size  int
	Cut   bool // the limit was reached: the answer is cut there
}

// take returns the part of s the bound still admits (cut at a rune
// boundary) and counts it; once the limit is reached it admits nothing.
func (b *OutputBound) Take(s string) string {
	if b.Cut {
		return ""
	}
	if b.Limit <= 0 {
		b.size += len(s)
		return s
	}
	room := b.Limit - b.size
	if len(s) > room {
		n := room
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s, b.Cut = s[:n], true
	}
	b.size += len(s)
	return s
}

// cutResponse marks r as an answer cut at the output bound. The usage a
// cut stream reported has no final output count: it is at least a token
// per four bytes read, so a budget still counts what the model wrote.
func (b *OutputBound) CutResponse(r llm.Response) llm.Response {
	r.FinishReason = llm.FinishLength
	r.OutputLimit = b.Limit
	r.Usage.OutputTokens = max(r.Usage.OutputTokens, int64(b.size/4))
	return r
}

// endpoint is the base URL to use (def when Config.BaseURL is empty) and
// the HTTP client.
func (cfg Config) Endpoint(def string) (string, *http.Client) {
	base, hc := cfg.BaseURL, cfg.HTTPClient
	if base == "" {
		base = def
	}
	if hc == nil {
		hc = &http.Client{Transport: DefaultTransport(base)}
	}
	return base, hc
}

// httpsMaxConnsPerHost caps the connections to one HTTPS host. Hosted APIs
// speak HTTP/2, which multiplexes calls over a few connections, but Go's
// transport dials one TLS connection for every call that starts before the
// first is up and keeps one: 5,000 children starting together spent 44 % of
// their CPU in TLS handshakes. With the cap, calls past it wait for a
// connection, and an HTTP/2 one is handed to all of them. An HTTPS server
// that speaks only HTTP/1.1 gets at most this many calls at once.
const HttpsMaxConnsPerHost = 64

// maxIdleConnsPerHost keeps the connections of calls that just ended for
// the next ones (Go keeps 2 per host by default): children of one model
// make their calls in parallel, and without it most calls dialled anew.
const maxIdleConnsPerHost = 100

// DefaultTransport is the transport a Config without an HTTPClient uses
// for baseURL: Go's default, tuned as described above and below. Callers
// that need their own TLS settings start from it.
func DefaultTransport(baseURL string) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = maxIdleConnsPerHost
	if t.MaxIdleConns < maxIdleConnsPerHost {
		t.MaxIdleConns = maxIdleConnsPerHost
	}
	if strings.HasPrefix(strings.ToLower(baseURL), "https:") {
		t.MaxConnsPerHost = HttpsMaxConnsPerHost
	}
	t.ResponseHeaderTimeout = 10 * time.Minute
	// An HTTP/1.1 connection keeps its buffers for its whole life, and
	// a child parked on a long model call holds one: 4 KiB each by
	// default. A request's body is mostly written past the buffer, and
	// stream events are small, so smaller ones cost a few more
	// syscalls per call and save 5 KiB per call in flight.
	t.WriteBufferSize = 1 << 10
	t.ReadBufferSize = 2 << 10
	return t
}

// Error is returned by both clients' Complete when no answer could be had, except
// for cancellation. Its message is safe to show and log: it carries neither
// the API key nor the URL.
type Error struct {
	// Attempts is the number of requests made.
	Attempts int
	// StatusCode is the HTTP status of the last attempt; 0 when it failed
	// before or after the status (connection error, broken stream).
	StatusCode int
	// Message describes the last failure, such as
	// "500 Internal Server Error: boom".
	Message string
	// Retryable reports whether the last failure was of a kind that is
	// retried (so a caller may try again later).
	Retryable bool

	cause error
}

func (e *Error) Error() string {
	if e.Attempts > 1 {
		return fmt.Sprintf("chat completion failed after %d attempts: %s", e.Attempts, e.Message)
	}
	return "chat completion failed: " + e.Message
}

// Unwrap returns the underlying error of the last attempt, if any. Unlike
// Error's message, it is not sanitised.
func (e *Error) Unwrap() error { return e.cause }

// retrier is the retry policy both backends share: which failures are
// retried, how long to wait, and how a final failure becomes a secret-free
// *Error.
type Retrier struct {
	apiKey     string
	maxRetries int
	baseDelay  time.Duration
	log        *slog.Logger
}

func NewRetrier(cfg Config) Retrier {
	r := Retrier{apiKey: cfg.APIKey, maxRetries: cfg.MaxRetries, baseDelay: cfg.RetryBaseDelay, log: cfg.Logger}
	switch {
	case r.maxRetries == 0:
		r.maxRetries = defaultMaxRetries
	case r.maxRetries < 0:
		r.maxRetries = 0
	}
	if r.baseDelay <= 0 {
		r.baseDelay = defaultRetryBaseDelay
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// paramsError is the *Error for a request that could not be mapped, before
// any attempt.
func (c *Retrier) ParamsError(err error) error {
	return &Error{Attempts: 0, Message: c.redact(err.Error()), cause: err}
}

// run calls attempt until it answers, fails for good, runs out of retries,
// or ctx ends, waiting between attempts as backoff says.
func (c *Retrier) Run(ctx context.Context, attempt func() (llm.Response, *Failure)) (llm.Response, error) {
	for n := 1; ; n++ {
		resp, f := attempt()
		if f == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return llm.Response{}, ctxError(ctx)
		}
		if !f.Retryable || n > c.maxRetries {
			return llm.Response{}, &Error{
				Attempts:   n,
				StatusCode: f.status,
				Message:    c.redact(f.Message),
				Retryable:  f.Retryable,
				cause:      f.Cause,
			}
		}
		delay := c.backoff(n, f.retryAfter)
		c.log.WarnContext(ctx, "chat completion failed, retrying",
			"attempt", n, "status", f.status, "error", c.redact(f.Message), "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return llm.Response{}, ctxError(ctx)
		case <-t.C:
		}
	}
}

// httpFailure judges an attempt by what the HTTP layer saw: cancellation,
// an error status, a request never sent, a connection that failed. It is
// nil when the exchange itself went through, and the caller judges the
// stream.
func (x *Exchange) HTTPFailure(ctx context.Context, err error) *Failure {
	switch {
	case ctx.Err() != nil:
		return &Failure{Message: ctx.Err().Error(), Cause: ctx.Err()}
	case x.status >= 400:
		msg := fmt.Sprintf("%d %s", x.status, http.StatusText(x.status))
		if x.status == 529 { // Anthropic's "overloaded", unknown to net/http
			msg = "529 Overloaded"
		}
		if x.message != "" {
			msg += ": " + x.message
		}
		return &Failure{
			status:     x.status,
			Message:    msg,
			Retryable:  x.status == http.StatusTooManyRequests || x.status >= 500,
			retryAfter: x.retryAfter,
			Cause:      err,
		}
	case err != nil && !x.sent:
		// The request could not even be built: retrying will not help.
		return &Failure{Message: "preparing request: " + err.Error(), Cause: err}
	case err != nil && x.status == 0:
		return &Failure{Message: "connection error: " + TransportMessage(err), Retryable: true, Cause: err}
	}
	return nil
}

// notAStream describes a 200 answer that carried no events, naming the
// content type when it was not an event stream.
func NotAStream(x *Exchange) *Failure {
	msg := "stream ended without an answer"
	if mt, _, _ := mime.ParseMediaType(x.contentType); mt != "" && mt != "text/event-stream" {
		msg += " (the server answered " + mt + ", not an event stream)"
	}
	return &Failure{Message: msg, Retryable: true}
}

// ctxError wraps ctx.Err() and, when different, the cancellation cause, so
// errors.Is works for both.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("chat completion: %w: %w", err, cause)
	}
	return fmt.Errorf("chat completion: %w", err)
}

// backoff is the wait before retry number attempt (1-based).
func (c *Retrier) backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := c.baseDelay
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, max(maxBackoff, c.baseDelay))
	d += rand.N(d/4 + 1)
	if retryAfter > d {
		d = min(retryAfter, maxRetryAfter)
	}
	return d
}

// redact removes the API key from a message meant for humans.
func (c *Retrier) redact(s string) string {
	if len(c.apiKey) >= 4 {
		s = strings.ReplaceAll(s, c.apiKey, "[REDACTED]")
	}
	if len(s) > maxMessageLen {
		s = s[:maxMessageLen] + "…"
	}
	return s
}

// failure is why one attempt produced no answer.
type Failure struct {
	status     int
	Message    string
	Retryable  bool
	retryAfter time.Duration
	Cause      error
}

// exchange records what the HTTP layer saw during one attempt. The SDK calls
// the middleware, and the decoder reads the body, on the goroutine that runs
// the attempt, so no locking is needed.
type Exchange struct {
	sent        bool
	status      int
	contentType string
	message     string // the server's error message, for statuses >= 400
	retryAfter  time.Duration
}

// middleware is an option.Middleware of either SDK (both declare it as
// this func type).
func (x *Exchange) Middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	x.sent = true
	res, err := next(req)
	if err != nil || res == nil {
		return res, err
	}
	x.status = res.StatusCode
	x.contentType = res.Header.Get("Content-Type")
	if res.StatusCode >= 400 {
		// Read the error ourselves: the SDK only understands
		// {"error":{...}} bodies and drops the status for anything else
		// (a proxy's HTML page, {"error":"text"}).
		body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
		_ = res.Body.Close()
		res.Body = io.NopCloser(bytes.NewReader(body))
		x.message = ErrorMessage(body)
		x.retryAfter = retryAfter(res.Header)
		return res, nil
	}
	return res, nil
}

// transportMessage describes a transport error without the request URL,
// which may carry credentials.
func TransportMessage(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// errorMessage extracts the human part of an error body: OpenAI's
// {"error":{"message":...}} (Anthropic's {"type":"error","error":{...}} too), the {"error":"..."} or {"message":"..."} of
// other servers, or the start of a plain-text body.
func ErrorMessage(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		if len(v.Error) > 0 && v.Error[0] == '{' {
			var e struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			}
			if json.Unmarshal(v.Error, &e) == nil {
				switch {
				case e.Message != "":
					return OneLine(e.Message)
				case e.Type != "":
					return e.Type
				case e.Code != nil:
					return fmt.Sprint(e.Code)
				}
			}
		}
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return OneLine(s)
		}
		if v.Message != "" {
			return OneLine(v.Message)
		}
		if json.Unmarshal(v.Detail, &s) == nil && s != "" {
			return OneLine(s)
		}
		return ""
	}
	if body[0] == '<' { // an HTML error page says nothing the status does not
		return ""
	}
	return OneLine(string(body))
}

func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// retryAfter reads the wait a server asks for, from retry-after-ms or
// Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
