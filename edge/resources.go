package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcp-subagent/mcp-subagent/internal/truncate"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Transcripts reads children's transcripts and watches them (the
// transcript resources). *manager.Manager implements it; a Manager without
// it serves no resources.
type Transcripts interface {
	Transcript(ctx context.Context, caller seam.ParentRef, childID string, after int64) (manager.Transcript, error)
	Watch(ctx context.Context, caller seam.ParentRef, childID string) (*manager.Watch, error)
}

var _ Transcripts = (*manager.Manager)(nil)

// ObserverClient is the clientInfo name of the command line's sessions
// (mcp-subagent ls, show, tail, send, interrupt): they read and steer
// children but take none of the principal's pending notices, which stay
// for the model clients' sessions.
const ObserverClient = "mcp-subagent-cli"

// observer reports whether ctx's session is the command line's.
func (s *Server) observer(ctx context.Context) bool {
	cs := server.ClientSessionFromContext(ctx)
	if cs == nil {
		return false
	}
	si := s.session(cs.SessionID())
	return si != nil && si.Client == ObserverClient
}

// TranscriptTemplate is the URI template of a child's transcript resource.
const TranscriptTemplate = "subagent://agents/{id}/transcript"

const (
	transcriptPrefix = "subagent://agents/"
	transcriptSuffix = "/transcript"
)

// TranscriptURI is the transcript resource of child id.
func TranscriptURI(id string) string { return transcriptPrefix + id + transcriptSuffix }

// transcriptID is the child id a transcript URI names.
func transcriptID(uri string) (string, bool) {
	id, ok := strings.CutPrefix(uri, transcriptPrefix)
	if !ok {
		return "", false
	}
	id, ok = strings.CutSuffix(id, transcriptSuffix)
	return id, ok && id != "" && !strings.ContainsAny(id, "/?#")
}

// registerResources adds the transcript template to ms. resources/list
// gets the caller's children from a hook (mcp-go lists only static or
// per-session resources), and subscriptions are served from hooks too.
func (s *Server) registerResources(ms *server.MCPServer) {
	if s.transcripts == nil {
		return
	}
	ms.AddResourceTemplate(mcp.NewResourceTemplate(TranscriptTemplate, "transcript",
		mcp.WithTemplateDescription("A subagent's transcript as JSON: turns, messages (a user message's source says who wrote it: user, subagent-report, or the runtime's subagent-settled notice), tool calls and results (each text bounded), usage, how turns ended. Subscribe for updates while it runs."),
		mcp.WithTemplateMIMEType("application/json")), s.readTranscript)
}

// echoBytes bounds what of a caller's own input (a URI, an id) an error or
// a log line quotes: enough to recognise it, never the megabyte sent.
const echoBytes = 200

// quote is s quoted for an error, cut to echoBytes (its length said when
// cut).
func quote(s string) string {
	if len(s) <= echoBytes {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q (%d bytes)", truncate.Head(s, echoBytes), len(s))
}

// A resources/read error's message starts with one of these words, which
// ResourceErrorCode maps to its JSON-RPC code. mcp-go answers every error
// of a resource handler with -32603 (internal error); the transports
// rewrite it by the word (ResourceErrorCode).
const (
	resNotFound = "RESOURCE_NOT_FOUND" // no such child, or not the caller's: -32002
	resInvalid  = "INVALID_PARAMS"     // a URI that names no transcript, or no plausible id: -32602
)

// ResourceErrorCode is the JSON-RPC code of a resources/read error with
// message msg: -32002 (resource not found, as the MCP specification says)
// for an unknown child or one the caller may not read (UNAUTHORIZED: to
// that caller it does not exist), -32602 (invalid params) for a malformed
// URI or id; ok is false for anything else (a store failure stays
// -32603).
func ResourceErrorCode(msg string) (code int, ok bool) {
	word, _, _ := strings.Cut(msg, ":")
	switch word {
	case resNotFound, string(seam.CodeUnauthorized):
		return mcp.RESOURCE_NOT_FOUND, true
	case resInvalid:
		return mcp.INVALID_PARAMS, true
	}
	return 0, false
}

func (s *Server) readTranscript(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	id, ok := transcriptID(req.Params.URI)
	if !ok {
		return nil, fmt.Errorf("%s: field \"uri\": %s is not %s", resInvalid, quote(req.Params.URI), TranscriptTemplate)
	}
	if len(id) > s.idBytes {
		return nil, fmt.Errorf("%s: field \"uri\": the id in it is %d bytes, over the %d bytes an id may have (limits.agent_id_bytes); use an id list_agents shows",
			resInvalid, len(id), s.idBytes)
	}
	caller, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.transcripts.Transcript(ctx, caller, id, 0)
	if err != nil {
		var e *seam.Error
		if errors.Is(err, seam.ErrNotFound) && errors.As(err, &e) {
			return nil, fmt.Errorf("%s: %s", resNotFound, e.Message)
		}
		return nil, err // "CODE: message"
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
}

// listTranscripts adds one page of the caller's subtree (manager.MaxPageLimit
// rows, in creation order) to a resources/list result, and the listing's
// cursor for the next page as nextCursor. The cursor is the listing's own
// (base64, which mcp-go's handler accepts and, having no static resources
// to page, ignores); a stale or foreign one lists nothing: a hook cannot
// fail the request, so the reason is logged.
func (s *Server) listTranscripts(ctx context.Context, _ any, req *mcp.ListResourcesRequest, res *mcp.ListResourcesResult) {
	caller, err := s.caller(ctx)
	if err != nil || res == nil {
		return
	}
	q := manager.ListQuery{Descendants: true, Limit: manager.MaxPageLimit}
	if req != nil {
		q.Cursor = string(req.Params.Cursor)
	}
	page, err := s.lister.List(caller, q)
	if err != nil {
		s.log.Debug("listing transcript resources", "err", err)
		return
	}
	res.NextCursor = mcp.Cursor(page.Next)
	for _, r := range page.Rows {
		if r.Kind != "child" {
			continue
		}
		name := r.Label
		if name == "" {
			name = r.ID
		}
		res.Resources = append(res.Resources, mcp.NewResource(TranscriptURI(r.ID), name,
			mcp.WithResourceDescription(fmt.Sprintf("transcript of %s (%s, %s)", r.ID, r.Provider, r.Status)),
			mcp.WithMIMEType("application/json")))
	}
}

// subscriptions are the transcript watches of subscribed sessions, each
// forwarding its child's changes as notifications/resources/updated. A
// subscription ends when its session unsubscribes or goes.
type subscriptions struct {
	mu sync.Mutex
	m  map[subKey]*subscription
}

type subKey struct{ session, uri string }

type subscription struct {
	stop chan struct{}
	done chan struct{}
}

// subscribe starts forwarding uri's changes to the session of ctx: one
// subscription per (session, URI), a repeat replacing it. A URI that is
// not the transcript of a child the caller may read was refused before
// (refuseSubscription); a session that cannot be pushed to gets an
// acknowledged subscription that never fires.
func (s *Server) subscribe(ctx context.Context, _ any, req *mcp.SubscribeRequest, _ *mcp.EmptyResult) {
	cs := server.ClientSessionFromContext(ctx)
	id, ok := transcriptID(req.Params.URI)
	if cs == nil || cs.SessionID() == "" || !ok {
		return
	}
	caller, err := s.caller(ctx)
	if err != nil {
		return
	}
	w, err := s.transcripts.Watch(ctx, caller, id)
	if err != nil {
		s.log.Debug("a transcript subscription gets no updates", "uri", truncate.Head(req.Params.URI, echoBytes), "err", err)
		return
	}
	key := subKey{cs.SessionID(), req.Params.URI}
	sub := &subscription{stop: make(chan struct{}), done: make(chan struct{})}
	s.subs.mu.Lock()
	if s.subs.m == nil {
		s.subs.m = map[subKey]*subscription{}
	}
	old := s.subs.m[key]
	s.subs.m[key] = sub
	s.subs.mu.Unlock()
	old.end()
	go s.forward(key, w, sub)
}

// forward pushes an update for every change w signals until the
// subscription stops or its session is gone.
func (s *Server) forward(key subKey, w *manager.Watch, sub *subscription) {
	defer close(sub.done)
	defer w.Stop()
	for {
		select {
		case <-sub.stop:
			return
		case <-w.C:
			err := s.mcp.SendNotificationToSpecificClient(key.session, mcp.MethodNotificationResourceUpdated, map[string]any{"uri": key.uri})
			if errors.Is(err, server.ErrSessionNotFound) {
				s.dropSubscription(key, sub)
				return
			}
			if err != nil {
				s.log.Debug("a resource update was not sent", "uri", key.uri, "err", err)
			}
		}
	}
}

// end stops sub and waits for its forwarder; nil is a no-op.
func (sub *subscription) end() {
	if sub == nil {
		return
	}
	select {
	case <-sub.stop:
	default:
		close(sub.stop)
	}
	<-sub.done
}

func (s *Server) dropSubscription(key subKey, sub *subscription) {
	s.subs.mu.Lock()
	if s.subs.m[key] == sub {
		delete(s.subs.m, key)
	}
	s.subs.mu.Unlock()
}

func (s *Server) unsubscribe(ctx context.Context, _ any, req *mcp.UnsubscribeRequest, _ *mcp.EmptyResult) {
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		s.endSubscriptions(func(k subKey) bool { return k.session == cs.SessionID() && k.uri == req.Params.URI })
	}
}

// endSubscriptions stops every subscription whose key match accepts.
func (s *Server) endSubscriptions(match func(subKey) bool) {
	s.subs.mu.Lock()
	var ended []*subscription
	for k, sub := range s.subs.m {
		if match(k) {
			ended = append(ended, sub)
			delete(s.subs.m, k)
		}
	}
	s.subs.mu.Unlock()
	for _, sub := range ended {
		sub.end()
	}
}

// CloseSubscriptions ends every transcript subscription (at shutdown).
func (s *Server) CloseSubscriptions() { s.endSubscriptions(func(subKey) bool { return true }) }

// resourceHooks serves the caller's transcript listing and the
// subscriptions.
func (s *Server) resourceHooks(h *server.Hooks) {
	if s.transcripts == nil {
		return
	}
	h.AddAfterListResources(s.listTranscripts)
	h.AddOnRequestInitialization(s.refuseSubscription)
	h.AddAfterSubscribe(s.subscribe)
	h.AddAfterUnsubscribe(s.unsubscribe)
	h.AddOnUnregisterSession(func(_ context.Context, cs server.ClientSession) {
		s.endSubscriptions(func(k subKey) bool { return k.session == cs.SessionID() })
	})
}

// refuseSubscription refuses a resources/subscribe whose URI is not the
// transcript of a child the caller may read. mcp-go acknowledges any
// subscription, and its subscribe hooks cannot refuse; this hook runs
// before the request is handled and can.
func (s *Server) refuseSubscription(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok || !bytes.Contains(raw, []byte(mcp.MethodResourcesSubscribe)) {
		return nil // not a subscribe, without parsing every message
	}
	var req struct {
		Method string `json:"method"`
		Params struct {
			URI string `json:"uri"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &req) != nil || req.Method != string(mcp.MethodResourcesSubscribe) {
		return nil
	}
	id, ok := transcriptID(req.Params.URI)
	if !ok {
		return fmt.Errorf("resources/subscribe: %.200q is not a subagent transcript; subscribe to a URI that resources/list shows (%s)", req.Params.URI, TranscriptTemplate)
	}
	caller, err := s.caller(ctx)
	if err != nil {
		return err
	}
	w, err := s.transcripts.Watch(ctx, caller, id)
	if err != nil {
		return fmt.Errorf("resources/subscribe %.200q: %w", req.Params.URI, err)
	}
	w.Stop()
	return nil
}
