package record

import (
	"context"
	"net/http"
	"net/http/httptest"
)

// Server is the recording half of a fake model server: an httptest server
// and the log of what it was asked, the requests it understood (R) and the
// others ("METHOD /path"). A fake embeds it and serves with Serve.
type Server[R any] struct {
	ts     *httptest.Server
	reqs   Log[R]
	others Log[string]
}

// Serve starts serving h on loopback.
func (s *Server[R]) Serve(h http.Handler) { s.ts = httptest.NewServer(h) }

// BaseURL is the server's root URL (http://127.0.0.1:PORT).
func (s *Server[R]) BaseURL() string { return s.ts.URL }

// Close shuts the server down, cutting open connections.
func (s *Server[R]) Close() {
	s.ts.CloseClientConnections()
	s.ts.Close()
}

// Requests returns every recorded request so far, in order of arrival.
func (s *Server[R]) Requests() []R { return s.reqs.All() }

// Others lists the other requests, "METHOD /path", in order of arrival.
func (s *Server[R]) Others() []string { return s.others.All() }

// Wait returns the first recorded request for which match holds, waiting
// for new arrivals until ctx ends.
func (s *Server[R]) Wait(ctx context.Context, match func(R) bool) (R, error) {
	return s.reqs.Wait(ctx, match)
}

// Record logs a request, made by mk from its sequence number.
func (s *Server[R]) Record(mk func(seq int) R) { s.reqs.Add(mk) }

// RecordOther logs a request the fake does not model.
func (s *Server[R]) RecordOther(r *http.Request) {
	s.others.Add(func(int) string { return r.Method + " " + r.URL.Path })
}
