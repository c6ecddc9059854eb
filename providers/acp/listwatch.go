package acp

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
)

// listWatch stands between one agent process and our callback server, on
// loopback, to tell when the agent has listed the callback tools: qwen
// 0.24.4 connects a session's MCP servers in the background, answers
// session/new before it has them, does not wait for them before its
// first model call, and drops an HTTP server that took more than 5 s.
// The driver waits for this signal before the first prompt, and opens
// another session when it does not come. Requests and answers pass
// unchanged (streamed, so SSE answers too).
type listWatch struct {
	url    string
	srv    *http.Server
	done   chan struct{} // closed when Serve has returned
	listed chan struct{} // closed when a tools/list was answered 200
	once   sync.Once
}

// maxListPeek bounds the request body read to look for tools/list; a
// larger body is passed on unread (it is no list request).
const maxListPeek = 64 << 10

func watchListing(target string) (*listWatch, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &listWatch{listed: make(chan struct{}), done: make(chan struct{})}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.URL.Path, r.Out.URL.RawPath = u.Path, u.RawPath
			r.Out.Host = u.Host
		},
		FlushInterval: -1,
	}
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		isList := false
		if r.Method == http.MethodPost && r.Body != nil {
			head, _ := io.ReadAll(io.LimitReader(r.Body, maxListPeek))
			var msg struct {
				Method string `json:"method"`
			}
			isList = json.Unmarshal(head, &msg) == nil && msg.Method == "tools/list"
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		}
		sw := &statusWriter{ResponseWriter: rw, code: http.StatusOK}
		proxy.ServeHTTP(sw, r)
		if isList && sw.code == http.StatusOK {
			w.once.Do(func() { close(w.listed) })
		}
	})}
	go func() {
		defer close(w.done)
		_ = w.srv.Serve(ln)
	}()
	w.url = "http://" + ln.Addr().String() + u.Path
	return w, nil
}

// close stops the proxy and its connections.
func (w *listWatch) close() {
	_ = w.srv.Close()
	<-w.done
}

// statusWriter records the status of an answer, passing flushes on.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
