package view

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mcp-subagent/mcp-subagent/edge/tokens"
	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Source is what the view needs from the manager; *manager.Manager is
// one. Every method applies the manager's own authority checks for the
// caller the view passes: the token's principal as a root caller.
type Source interface {
	ListDescendants(caller seam.ParentRef) ([]manager.Row, error)
	Transcript(ctx context.Context, caller seam.ParentRef, childID string, after int64) (manager.Transcript, error)
	Watch(ctx context.Context, caller seam.ParentRef, childID string) (*manager.Watch, error)
	Interrupt(caller seam.ParentRef, childID string) error
	Followup(ctx context.Context, caller seam.ParentRef, childID, content string, wait bool) (*manager.Sent, error)
	AnswerVia(ctx context.Context, caller seam.ParentRef, childID, questionID, text, via string) (*seam.Question, error)
	Subscribe(fn func(manager.Event)) (cancel func())
}

var _ Source = (*manager.Manager)(nil)

// Options configure a Server. The zero value of each field is its default.
type Options struct {
	Logger *slog.Logger // nil: silent
	// Tick is how often a tree stream re-reads the tree when no lifecycle
	// event came; zero: one second.
	Tick time.Duration
	// MaxRows bounds the rows a tree stream sends (the snapshot and each
	// change): the newest; zero: 5000. A tree with more says how many
	// older ones it left out.
	MaxRows int
	// MaxEntries bounds the entries a transcript stream sends first (the
	// latest ones); zero: 1000.
	MaxEntries int
	// MaxMessageBytes bounds a message sent from the view; zero: 1 MiB.
	MaxMessageBytes int
	// Heartbeat is how often an idle stream sends a comment line so
	// proxies and the browser keep it; zero: 15 seconds.
	Heartbeat time.Duration
	// MaxStreams bounds the streams (tree and transcript) one principal
	// holds open at a time; one more is refused with 429. Zero:
	// DefaultMaxStreams.
	MaxStreams int
	// SameOrigin reports whether a state-changing request's Origin header
	// is the view's own origin: the server that mounts the view knows its
	// listener's names. Nil: the Origin's host must be the request's Host,
	// which is enough only where the Host was checked first (a page on a
	// name rebound to 127.0.0.1 sends its own name as both).
	SameOrigin func(origin string, r *http.Request) bool
	// Tokens is the token registry the view's tokens are minted in (the
	// edge's, shared with the HTTP and callback tokens); nil: one of its
	// own.
	Tokens *tokens.Registry
}

// Server is the web view: its principals' tokens and their streams. Build
// one with New, serve Handler, and Close it when done.
type Server struct {
	src  Source
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	closed  bool
	done    chan struct{} // closed by Close: every stream ends
	streams sync.WaitGroup
	feeds   map[string]*feed // principal -> its tree streams' shared listing
	open    map[string]int   // principal -> its streams open
}

// New returns a view over src.
func New(src Source, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 5000
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1000
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = 1 << 20
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.SameOrigin == nil {
		o.SameOrigin = sameOrigin
	}
	if o.Tokens == nil {
		o.Tokens = tokens.New()
	}
	return &Server{src: src, opts: o, log: o.Logger, done: make(chan struct{}),
		feeds: map[string]*feed{}, open: map[string]int{}}
}

// Token returns principal's view token, minting it on first use: 128
// random bits, unguessable, valid until Close.
func (s *Server) Token(principal string) (string, error) {
	return s.opts.Tokens.ViewToken(principal)
}

// URL is the address of principal's view under base (the handler's root,
// e.g. "http://127.0.0.1:4321/"), token included.
func (s *Server) URL(base, principal string) (string, error) {
	t, err := s.Token(principal)
	if err != nil {
		return "", err
	}
	return base + "?token=" + url.QueryEscape(t), nil
}

// principal is the principal of r's token; "" (with the status to answer)
// when it has none or an unknown one.
func (s *Server) principal(r *http.Request) (string, int) {
	tok := r.URL.Query().Get("token")
	if tok == "" {
		return "", http.StatusUnauthorized
	}
	if p, ok := s.opts.Tokens.Principal(tokens.View, tok); ok {
		return p, 0
	}
	return "", http.StatusForbidden
}

// Close ends every stream and waits for them; tokens stop working.
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.opts.Tokens.RevokeView()
		close(s.done)
	}
	s.mu.Unlock()
	s.streams.Wait()
}

// stream registers a stream; false when the server is closed.
func (s *Server) stream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams.Add(1)
	return true
}

//go:embed static
var static embed.FS

// Handler serves the view at its root: the page (index.html), its assets
// and the API (api/...). Mount it under a prefix with http.StripPrefix; the
// page's addresses are relative.
func (s *Server) Handler() http.Handler {
	assets, _ := fs.Sub(static, "static")
	files := http.FileServerFS(assets)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", files)) // no data: no token needed
	mux.HandleFunc("GET /api/tree", s.authed(s.tree))
	mux.HandleFunc("GET /api/transcript", s.authed(s.transcript))
	mux.HandleFunc("POST /api/interrupt", s.authed(s.action(s.interrupt)))
	mux.HandleFunc("POST /api/send", s.authed(s.action(s.send)))
	mux.HandleFunc("POST /api/answer", s.authed(s.action(s.answer)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Referrer-Policy", "no-referrer") // the token is in the URL
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})
}

const tokenRequired = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>mcp-subagent: token required</title></head>
<body><h1>token required</h1><p>Open the address <code>mcp-subagent ui</code> printed; it carries the view's token.</p></body></html>
`

// page serves the app with a valid token, and only the "token required"
// page without: the page carries no data, but a stale or guessed address
// should say plainly why it shows nothing.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	if p, _ := s.principal(r); p == "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, tokenRequired)
		return
	}
	b, err := static.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// authed runs h for the request's principal; without a valid token it
// answers 401 (none) or 403 (unknown), naming the query parameter.
func (s *Server) authed(h func(w http.ResponseWriter, r *http.Request, caller seam.ParentRef)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, status := s.principal(r)
		if p == "" {
			msg := `UNAUTHORIZED: field "token": the view's token is required; open the address mcp-subagent ui printed`
			if status == http.StatusForbidden {
				msg = `UNAUTHORIZED: field "token": not a token of this view; open the address mcp-subagent ui printed`
			}
			writeError(w, status, msg)
			return
		}
		h(w, r, seam.ParentRef{Principal: p})
	}
}

// action guards a state-changing request: a POST with a JSON body from no
// other origin (a cross-site form cannot send one without a preflight the
// view never answers).
func (s *Server) action(h func(w http.ResponseWriter, r *http.Request, caller seam.ParentRef)) func(http.ResponseWriter, *http.Request, seam.ParentRef) {
	return func(w http.ResponseWriter, r *http.Request, caller seam.ParentRef) {
		if o := r.Header.Get("Origin"); o != "" && !s.opts.SameOrigin(o, r) {
			writeError(w, http.StatusForbidden, fmt.Sprintf("UNAUTHORIZED: origin %q is not this view's", truncate.Head(o, 200)))
			return
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			writeError(w, http.StatusUnsupportedMediaType, `INVALID_REQUEST: the body must be JSON (Content-Type: application/json)`)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, int64(s.opts.MaxMessageBytes)+4096)
		h(w, r, caller)
	}
}

func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

type actionReq struct {
	ID      string `json:"id"`
	Message string `json:"message"`
	// Question is the question an answer answers (api/answer).
	Question string `json:"question,omitempty"`
}

func decodeAction(w http.ResponseWriter, r *http.Request, needMessage bool, maxMsg int) (actionReq, bool) {
	var in actionReq
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(`INVALID_REQUEST: field "message": over %d bytes; send a shorter message`, maxMsg))
			return in, false
		}
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST: the body is not JSON {\"id\": ..., \"message\": ...}: "+err.Error())
		return in, false
	}
	switch {
	case in.ID == "":
		writeError(w, http.StatusBadRequest, `INVALID_REQUEST: field "id": required; give the child's id`)
		return in, false
	case len(in.ID) > maxIDBytes:
		writeError(w, http.StatusBadRequest, fmt.Sprintf(`INVALID_REQUEST: field "id": %d bytes, no child's id (at most %d)`, len(in.ID), maxIDBytes))
		return in, false
	case needMessage && strings.TrimSpace(in.Message) == "":
		writeError(w, http.StatusBadRequest, `INVALID_REQUEST: field "message": must not be empty; write the message to send`)
		return in, false
	case len(in.Message) > maxMsg:
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(`INVALID_REQUEST: field "message": over %d bytes; send a shorter message`, maxMsg))
		return in, false
	}
	return in, true
}

func (s *Server) interrupt(w http.ResponseWriter, r *http.Request, caller seam.ParentRef) {
	in, ok := decodeAction(w, r, false, s.opts.MaxMessageBytes)
	if !ok {
		return
	}
	if err := s.src.Interrupt(caller, in.ID); err != nil {
		writeManagerError(w, err)
		return
	}
	s.log.Info("interrupt from the web view", "agent_id", in.ID, "principal", caller.Principal)
	writeJSON(w, http.StatusOK, map[string]any{"accepted": true})
}

func (s *Server) send(w http.ResponseWriter, r *http.Request, caller seam.ParentRef) {
	in, ok := decodeAction(w, r, true, s.opts.MaxMessageBytes)
	if !ok {
		return
	}
	sent, err := s.src.Followup(r.Context(), caller, in.ID, in.Message, false)
	if err != nil {
		writeManagerError(w, err)
		return
	}
	s.log.Info("message from the web view", "agent_id", in.ID, "principal", caller.Principal, "message_id", sent.MessageID)
	writeJSON(w, http.StatusOK, map[string]any{"message_id": sent.MessageID, "route": sent.Route, "agent_id": in.ID})
}

// answer answers a question the child waits on, as the person in the web
// view: the manager records it so (seam.ViaWebView).
func (s *Server) answer(w http.ResponseWriter, r *http.Request, caller seam.ParentRef) {
	in, ok := decodeAction(w, r, true, s.opts.MaxMessageBytes)
	if !ok {
		return
	}
	if in.Question == "" || len(in.Question) > maxIDBytes {
		writeError(w, http.StatusBadRequest, `INVALID_REQUEST: field "question": required; give the id of the question you answer`)
		return
	}
	q, err := s.src.AnswerVia(r.Context(), caller, in.ID, in.Question, in.Message, seam.ViaWebView)
	if err != nil {
		writeManagerError(w, err)
		return
	}
	s.log.Info("answer from the web view", "agent_id", in.ID, "principal", caller.Principal, "question", q.ID, "outcome", q.Answer.Outcome)
	writeJSON(w, http.StatusOK, map[string]any{"agent_id": q.ChildID, "question": q.ID, "answer": q.Answer.Text, "outcome": q.Answer.Outcome})
}

// writeManagerError answers a manager error with the status its code
// means and the tools' wording ("CODE: sentence").
func writeManagerError(w http.ResponseWriter, err error) {
	var e *seam.Error
	if !errors.As(err, &e) {
		writeError(w, http.StatusInternalServerError, truncate.Bound(err.Error(), maxErrorBytes))
		return
	}
	status := http.StatusBadRequest
	switch e.Code {
	case seam.CodeUnauthorized:
		status = http.StatusForbidden
	case seam.CodePersistenceUnavailable, seam.CodeControlUnavailable, seam.CodeDraining:
		status = http.StatusServiceUnavailable
	case seam.CodeNotResumable:
		status = http.StatusConflict
	}
	// Bounded: a message may quote what the request named.
	writeError(w, status, truncate.Bound(fmt.Sprintf("%s: %s", e.Code, e.Message), maxErrorBytes))
}

// maxIDBytes bounds a child's id in a request (the server mints 22-byte
// ids); maxErrorBytes an error's text.
const (
	maxIDBytes    = 256
	maxErrorBytes = 1024
)

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
