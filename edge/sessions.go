package edge

import (
	"context"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// SessionInfo describes one session of a root principal: one connection of
// an MCP client.
type SessionInfo struct {
	ID        string
	Principal string
	Client    string // the client's clientInfo.name, once it initialized
	// Cwd is the client's working directory when the transport tells it
	// (the daemon's socket relay does): the session's project, the default
	// cwd of its children and one of its allowed roots.
	Cwd string
	// Settings are the session's settings its children run with (the
	// daemon's relay sends them); nil: the deployment's own.
	Settings *seam.Settings
}

// session is a known session and how it is connected.
type session struct {
	SessionInfo
	open     int       // open streams: a socket connection, an HTTP GET stream
	lastSeen time.Time // the last request (HTTP sessions without a stream)
}

// httpSessionGrace is how long an HTTP session that holds no GET stream
// counts as connected after its last request: its notices wait for it
// that long before any session of its principal may take them.
const httpSessionGrace = 2 * time.Minute

// openSession registers a connected session (ServeConn's: a connection of
// the daemon's relay, or the in-process stdio session); the returned func
// ends it. While it is open, notices of the children it starts are its
// alone.
func (s *Server) openSession(info SessionInfo) (end func()) {
	s.mu.Lock()
	se := s.sessionsByID[info.ID]
	if se == nil {
		se = &session{SessionInfo: info}
		s.sessionsByID[info.ID] = se
	} else {
		if info.Cwd != "" {
			se.Cwd = info.Cwd
		}
		if info.Settings != nil {
			se.Settings = info.Settings
		}
	}
	se.open++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		se.open--
		gone := se.open <= 0
		if gone {
			delete(s.sessionsByID, info.ID)
		}
		s.mu.Unlock()
		if gone {
			s.notices.SessionGone(info.ID)
		}
	}
}

// EndSession forgets a session its client ended (an HTTP DELETE): its
// pending notices become any session's of its principal at once.
func (s *Server) EndSession(id string) {
	s.mu.Lock()
	_, known := s.sessionsByID[id]
	delete(s.sessionsByID, id)
	s.mu.Unlock()
	if known {
		s.notices.SessionGone(id)
	}
}

// SessionConnected reports whether a session is connected here; it is the
// manager's Options.SessionConnected (the manager shares it with other
// instances through the store).
func (s *Server) SessionConnected(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessionsByID[id]
	return se != nil && se.connected(time.Now())
}

func (se *session) connected(now time.Time) bool {
	return se.open > 0 || now.Sub(se.lastSeen) < httpSessionGrace
}

// session returns what is known of a session, or nil.
func (s *Server) session(id string) *SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	if se := s.sessionsByID[id]; se != nil {
		info := se.SessionInfo
		return &info
	}
	return nil
}

// SessionPrincipal is the principal HTTP session id is bound to; false
// when the session is unknown (nothing is bound by asking).
func (s *Server) SessionPrincipal(id string) (string, bool) {
	if se := s.session(id); se != nil && se.Principal != "" {
		return se.Principal, true
	}
	return "", false
}

// seen records a root call of principal on its session, and reports false
// when the session belongs to another principal (a session is bound to the
// principal that created it).
func (s *Server) seen(ctx context.Context, principal string) bool {
	cs := server.ClientSessionFromContext(ctx)
	if cs == nil || cs.SessionID() == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se, ok := s.bindLocked(cs.SessionID(), principal)
	if ok && se.Client == "" {
		if ci, isCI := cs.(server.SessionWithClientInfo); isCI {
			se.Client = ci.GetClientInfo().Name
		}
	}
	return ok
}

// BindSession binds HTTP session id to principal if it is not bound yet
// (an id from before a restart, unknown here) and reports whether it is
// principal's. A request is activity: it keeps the session connected.
func (s *Server) BindSession(id, principal string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.bindLocked(id, principal)
	return ok
}

// bindLocked finds or makes session id, binds it to principal if unbound,
// and counts the call as activity when it is principal's.
func (s *Server) bindLocked(id, principal string) (*session, bool) {
	now := time.Now()
	s.pruneLocked(now)
	se := s.sessionsByID[id]
	if se == nil {
		se = &session{SessionInfo: SessionInfo{ID: id, Principal: principal}}
		s.sessionsByID[id] = se
	}
	if se.Principal == "" {
		se.Principal = principal
	}
	if se.Principal != principal {
		return se, false
	}
	se.lastSeen = now
	return se, true
}

// SessionCount is the number of sessions the tools know of: connected
// ones, and HTTP sessions ended or idled out less than a grace period ago.
func (s *Server) SessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(time.Now())
	return len(s.sessionsByID)
}

// pruneLocked forgets sessions no longer connected (HTTP sessions ended or
// idled out, past their grace), so abandoned ones do not pile up. It runs
// on session activity, sweeping at most every httpSessionGrace/4: the table
// stays bounded by the sessions of one grace period, in amortised constant
// time and with no goroutine of its own.
func (s *Server) pruneLocked(now time.Time) {
	if now.Sub(s.lastPrune) < httpSessionGrace/4 {
		return
	}
	s.lastPrune = now
	for k, se := range s.sessionsByID {
		if !se.connected(now) {
			delete(s.sessionsByID, k)
		}
	}
}

// sessionsOf returns the ids of principal's connected sessions.
func (s *Server) sessionsOf(principal string) []string {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, se := range s.sessionsByID {
		if se.Principal == principal && se.connected(now) {
			ids = append(ids, id)
		}
	}
	return ids
}

// Hooks are the MCP server hooks the tools need: the client's name from
// initialize, and HTTP GET streams opening and closing (a session holding
// one is connected).
func (s *Server) Hooks() *server.Hooks {
	h := &server.Hooks{}
	s.resourceHooks(h)
	h.AddAfterInitialize(func(ctx context.Context, _ any, req *mcp.InitializeRequest, _ *mcp.InitializeResult) {
		cs := server.ClientSessionFromContext(ctx)
		if cs == nil || cs.SessionID() == "" {
			return
		}
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.pruneLocked(now)
		se := s.sessionsByID[cs.SessionID()]
		if se == nil {
			se = &session{SessionInfo: SessionInfo{ID: cs.SessionID(), Principal: Principal(ctx)}, lastSeen: now}
			s.sessionsByID[cs.SessionID()] = se
		}
		se.Client = req.Params.ClientInfo.Name
	})
	h.AddOnRegisterSession(func(ctx context.Context, cs server.ClientSession) {
		if _, stream := cs.(*streamSession); stream {
			return // ServeConn tracks these
		}
		s.mu.Lock()
		se := s.sessionsByID[cs.SessionID()]
		if se == nil {
			se = &session{SessionInfo: SessionInfo{ID: cs.SessionID(), Principal: Principal(ctx)}}
			s.sessionsByID[cs.SessionID()] = se
		}
		se.open++
		s.mu.Unlock()
	})
	h.AddOnUnregisterSession(func(ctx context.Context, cs server.ClientSession) {
		if _, stream := cs.(*streamSession); stream {
			return
		}
		now := time.Now()
		s.mu.Lock()
		if se := s.sessionsByID[cs.SessionID()]; se != nil && se.open > 0 {
			se.open--
			se.lastSeen = now
		}
		s.pruneLocked(now)
		s.mu.Unlock()
		s.notices.SessionGone(cs.SessionID())
	})
	return h
}

// clientWait is the bound on any wait for the calling session's client:
// the configured one for its clientInfo.name (Codex cancels a tool call
// after 60 s by default, so its bound is below that); zero: none.
func (s *Server) clientWait(ctx context.Context) float64 {
	cs := server.ClientSessionFromContext(ctx)
	if cs == nil {
		return 0
	}
	name := ""
	if si := s.session(cs.SessionID()); si != nil {
		name = si.Client
	}
	if name == "" {
		if ci, ok := cs.(server.SessionWithClientInfo); ok {
			name = ci.GetClientInfo().Name
		}
	}
	return s.opts.ClientWaitSeconds[name]
}
