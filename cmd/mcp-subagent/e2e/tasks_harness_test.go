//go:build e2e || realcli || browser

package e2e

// A raw JSON-RPC client of the 2026-07-28 protocol for the durable MCP
// tasks tests (tasks_protocol_test.go): it speaks to the built binary over
// stdio (relayed to the data directory's daemon) or streamable HTTP, with
// the per-request _meta envelope, declaring the tasks extension or not.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const tasksExt = "io.modelcontextprotocol/tasks"

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
	raw     json.RawMessage // the error object as sent
	status  int             // 400 when it came over HTTP as a 400; else 0
}

func (e *rpcError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// rawClient sends requests and returns each answer's result or error.
type rawClient struct {
	t       testing.TB
	declare bool // declare the tasks extension on every request
	send    func(ctx context.Context, id int64, method string, body []byte) (json.RawMessage, *rpcError, error)
	nextID  atomic.Int64
	close   func()
}

// meta is the request envelope of protocol 2026-07-28, as Claude Code
// sends it (probed: on every request).
func (c *rawClient) meta() map[string]any {
	caps := map[string]any{}
	if c.declare {
		caps["extensions"] = map[string]any{tasksExt: map[string]any{}}
	}
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "tasks-e2e", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps,
	}
}

func (c *rawClient) do(ctx context.Context, method string, params map[string]any) (json.RawMessage, *rpcError) {
	c.t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = c.meta()
	id := c.nextID.Add(1)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	res, rerr, err := c.send(ctx, id, method, body)
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	return res, rerr
}

// result fails the test on an error answer.
func (c *rawClient) result(ctx context.Context, method string, params map[string]any) map[string]any {
	c.t.Helper()
	raw, rerr := c.do(ctx, method, params)
	if rerr != nil {
		c.t.Fatalf("%s answered an error: %v", method, rerr)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("%s result %s: %v", method, raw, err)
	}
	return m
}

func (c *rawClient) callTool(ctx context.Context, name string, args map[string]any) map[string]any {
	c.t.Helper()
	return c.result(ctx, "tools/call", map[string]any{"name": name, "arguments": args})
}

// stdioClient runs `serve` (relayed to dataDir's daemon, unless extra
// says --no-daemon) in workspace.
func stdioClient(t *testing.T, env []string, dataDir, workspace string, declare bool, extra ...string) *rawClient {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--data-dir", dataDir, "--log-format", "json", "--log-level", "debug"}, extra...)...)
	cmd.Env, cmd.Dir = env, workspace
	stderr := &syncBuffer{}
	stdin, stdout := startPiped(t, cmd, stderr)
	var mu sync.Mutex
	waiting := map[int64]chan []byte{}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var env struct {
				ID     *int64 `json:"id"`
				Method string `json:"method"`
			}
			if json.Unmarshal(sc.Bytes(), &env) != nil || env.ID == nil || env.Method != "" {
				continue // a notification, or a request of the server's
			}
			mu.Lock()
			ch := waiting[*env.ID]
			delete(waiting, *env.ID)
			mu.Unlock()
			if ch != nil {
				ch <- bytes.Clone(sc.Bytes())
			}
		}
	}()
	var wmu sync.Mutex
	c := &rawClient{t: t, declare: declare}
	c.send = func(ctx context.Context, id int64, method string, body []byte) (json.RawMessage, *rpcError, error) {
		ch := make(chan []byte, 1)
		mu.Lock()
		waiting[id] = ch
		mu.Unlock()
		wmu.Lock()
		_, err := stdin.Write(append(body, '\n'))
		wmu.Unlock()
		if err != nil {
			return nil, nil, err
		}
		select {
		case line := <-ch:
			return decodeAnswer(line)
		case <-readDone:
			return nil, nil, fmt.Errorf("the server closed stdout; stderr:\n%s", stderr)
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("no answer: %w; stderr:\n%s", ctx.Err(), stderr)
		}
	}
	var once sync.Once
	c.close = func() {
		once.Do(func() {
			stdin.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(c.close)
	return c
}

// startPiped starts cmd with pipes to its stdin and from its stdout,
// its stderr into stderr.
func startPiped(t testing.TB, cmd *exec.Cmd, stderr io.Writer) (io.WriteCloser, io.ReadCloser) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdin, stdout
}

// httpClient posts to url (the server's /mcp) with token as its bearer.
func httpClient(t *testing.T, url, token string, declare bool) *rawClient {
	c := &rawClient{t: t, declare: declare, close: func() {}}
	c.send = func(ctx context.Context, id int64, method string, body []byte) (json.RawMessage, *rpcError, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		var p struct {
			Params struct {
				TaskID string `json:"taskId"`
				Name   string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &p)
		if p.Params.TaskID != "" { // the spec's routing header for tasks/*
			req.Header.Set("Mcp-Name", p.Params.TaskID)
		} else if p.Params.Name != "" {
			req.Header.Set("Mcp-Name", p.Params.Name)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode == http.StatusBadRequest && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			// A JSON-RPC error the protocol sends as a 400.
			res, rerr, err := decodeAnswer(b)
			if err == nil && rerr != nil {
				rerr.status = resp.StatusCode
				return res, rerr, nil
			}
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			// The answer is the SSE event whose data is a response.
			for _, line := range strings.Split(string(b), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				var env struct {
					ID *int64 `json:"id"`
				}
				if json.Unmarshal([]byte(data), &env) == nil && env.ID != nil && *env.ID == id {
					return decodeAnswer([]byte(data))
				}
			}
			return nil, nil, fmt.Errorf("no answer in the event stream: %s", b)
		}
		return decodeAnswer(b)
	}
	return c
}

func decodeAnswer(b []byte) (json.RawMessage, *rpcError, error) {
	var a struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, nil, fmt.Errorf("answer %s: %w", b, err)
	}
	if len(a.Error) == 0 || string(a.Error) == "null" {
		return a.Result, nil, nil
	}
	e := &rpcError{raw: a.Error}
	if err := json.Unmarshal(a.Error, e); err != nil {
		return nil, nil, fmt.Errorf("answer %s: %w", b, err)
	}
	return a.Result, e, nil
}

// taskServer is the server under test on one transport: how to open a
// client (a new session) and how to kill -9 and restart the server.
type taskServer struct {
	t         *testing.T
	http      bool
	env       []string
	dataDir   string
	workspace string
	config    string
	url       string
	token     string // the bearer token a tokenless serve --http minted
	proc      *serverProc
	stderr    *syncBuffer
}

func newTaskServer(t *testing.T, httpT bool, child *childModel, config string) *taskServer {
	s := &taskServer{t: t, http: httpT, env: serverEnv(child.Server, nil), dataDir: t.TempDir(), workspace: realDir(t), config: config}
	if !httpT {
		t.Cleanup(func() { stopDaemon(t, s.dataDir) })
	}
	s.start()
	return s
}

func (s *taskServer) start() {
	if !s.http {
		return // each stdio client's serve starts the daemon when none runs
	}
	args := []string{"serve", "--data-dir", s.dataDir, "--log-format", "json", "--log-level", "debug", "--http", "127.0.0.1:0"}
	if s.config != "" {
		p := filepath.Join(s.t.TempDir(), "config.json")
		if err := os.WriteFile(p, []byte(s.config), 0o600); err != nil {
			s.t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	s.stderr = &syncBuffer{}
	s.proc, s.url, s.token = launchHTTP(s.t, args, s.env, s.workspace, s.stderr)
}

// client opens a session (stdio: a new serve process; HTTP: a client).
func (s *taskServer) client(declare bool, token string) *rawClient {
	if s.http {
		if token == "" {
			token = s.token
		}
		return httpClient(s.t, s.url, token, declare)
	}
	return stdioClient(s.t, s.env, s.dataDir, s.workspace, declare)
}

// kill9 kills the server holding the store with SIGKILL (stdio: the
// daemon, by the pid its lock file holds) and waits until it is gone.
func (s *taskServer) kill9() {
	s.t.Helper()
	if s.http {
		s.proc.kill()
		return
	}
	b, err := os.ReadFile(filepath.Join(s.dataDir, "daemon.lock"))
	if err != nil {
		s.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		s.t.Fatalf("daemon.lock holds %q", b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	if !waitFor(15*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		s.t.Fatalf("daemon %d outlived SIGKILL", pid)
	}
}

func (s *taskServer) diag() string {
	if s.http {
		return tail(s.stderr.String(), 4000)
	}
	b, _ := os.ReadFile(filepath.Join(s.dataDir, "daemon.log"))
	return tail(string(b), 4000)
}

// pollTask polls tasks/get until the task's status is not working, or
// fails the test after d.
func pollTask(t *testing.T, ctx context.Context, c *rawClient, id string, d time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m := c.result(ctx, "tasks/get", map[string]any{"taskId": id})
		if m["status"] != "working" || time.Now().After(deadline) {
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tasks/get %s: %v", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
