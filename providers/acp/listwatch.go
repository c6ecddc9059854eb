package acp

import (
	"bytes"
	"context"
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
		// Signalled here, before the answer is relayed, so whoever
		// holds the answer knows the signal is already given.
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusOK && resp.Request.Context().Value(listKey{}) != nil {
				w.once.Do(func() { close(w.listed) })
			}
			return nil
		},
	}
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Body != nil {
			head, _ := io.ReadAll(io.LimitReader(r.Body, maxListPeek))
			var msg struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(head, &msg) == nil && msg.Method == "tools/list" {
				r = r.WithContext(context.WithValue(r.Context(), listKey{}, true))
			}
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		}
		proxy.ServeHTTP(rw, r)
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

// listKey marks, in a request's context, a tools/list request.
type listKey struct{}
