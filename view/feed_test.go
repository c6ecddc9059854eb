package view

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// countingSource lists a tree of one running child whose usage grows on
// every listing (so each listing is a change every stream sends), and
// counts the listings.
type countingSource struct {
	lists atomic.Int64
}

func (c *countingSource) ListDescendants(seam.ParentRef) ([]manager.Row, error) {
	n := c.lists.Add(1)
	u := seam.Usage{InputTokens: n}
	return []manager.Row{{Kind: "child", ID: "busy", Status: manager.StatusRunning, Usage: &u}}, nil
}
func (*countingSource) Transcript(context.Context, seam.ParentRef, string, int64) (manager.Transcript, error) {
	return manager.Transcript{}, errors.New("no transcripts here")
}
func (*countingSource) Watch(context.Context, seam.ParentRef, string) (*manager.Watch, error) {
	return nil, errors.New("no transcripts here")
}
func (*countingSource) Interrupt(seam.ParentRef, string) error { return nil }
func (*countingSource) Followup(context.Context, seam.ParentRef, string, string, bool) (*manager.Sent, error) {
	return nil, errors.New("no messages here")
}
func (*countingSource) AnswerVia(context.Context, seam.ParentRef, string, string, string, string) (*seam.Question, error) {
	return nil, errors.New("no questions here")
}
func (*countingSource) Subscribe(func(manager.Event)) func() { return func() {} }

func serveView(t *testing.T, src Source, o Options) (*Server, *rig) {
	t.Helper()
	v := New(src, o)
	h := v.Handler()
	returned := make(chan string, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(w, req)
		select {
		case returned <- req.URL.Path:
		default:
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		v.Close()
		srv.Close()
	})
	return v, &rig{v: v, srv: srv, returned: returned}
}

// N tree streams of one principal cost one listing per tick between
// them, not one each: the principal's feed lists once and every stream
// sends the result.
func TestStreamsOfOnePrincipalShareOneListingPerTick(t *testing.T) {
	src := &countingSource{}
	const streams, changes = 20, 5
	v, r := serveView(t, src, Options{Tick: 20 * time.Millisecond, MaxStreams: streams})
	tok, err := v.Token("alice")
	if err != nil {
		t.Fatal(err)
	}
	var ss []*stream
	for range streams {
		s := r.open(t, "/api/tree?token="+tok)
		decode[Snapshot](t, s.next(t), "snapshot")
		ss = append(ss, s)
	}
	before := src.lists.Load()
	for range changes {
		for _, s := range ss {
			decode[Change](t, s.next(t), "change")
		}
	}
	// Each stream saw `changes` listings; shared, that takes about that
	// many ticks (a slow stream may skip one). Unshared it is streams ×
	// changes listings.
	if got := src.lists.Load() - before; got > 4*changes {
		t.Errorf("%d streams reading %d changes each caused %d listings, want about %d (one per tick, shared)", streams, changes, got, changes)
	}
}

// A principal's streams beyond Options.MaxStreams are refused with 429 and
// a message naming the limit; when one ends another is admitted. Another
// principal is not affected.
func TestStreamsPerPrincipalAreCapped(t *testing.T) {
	src := &countingSource{}
	v, r := serveView(t, src, Options{Tick: time.Hour, MaxStreams: 3})
	tok, _ := v.Token("alice")
	other, _ := v.Token("bob")
	var ss []*stream
	for range 3 {
		s := r.open(t, "/api/tree?token="+tok)
		decode[Snapshot](t, s.next(t), "snapshot")
		ss = append(ss, s)
	}
	res, err := http.Get(r.srv.URL + "/api/tree?token=" + tok)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusTooManyRequests { // a stream: reading its body would never end
		res.Body.Close()
		t.Fatalf("a 4th stream: %d, want 429", res.StatusCode)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), "MaxStreams") || !strings.Contains(string(b), "3 streams open") {
		t.Fatalf("a 4th stream: %d %s; want 429 naming the limit", res.StatusCode, b)
	}
	decode[Snapshot](t, r.open(t, "/api/tree?token="+other).next(t), "snapshot")
	ss[0].close()
	// Two handlers return: the refused request's and the closed stream's,
	// whose slot is then free.
	<-r.returned
	<-r.returned
	decode[Snapshot](t, r.open(t, "/api/tree?token="+tok).next(t), "snapshot")
}
