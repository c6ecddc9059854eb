//go:build e2e || realcli || browser

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeacp"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
)

// mainPkg is the server's package, which TestMain builds.
const mainPkg = "github.com/mcp-subagent/mcp-subagent/cmd/mcp-subagent"

// binary is the server built once for the end-to-end tests.
var binary string

func TestMain(m *testing.M) {
	// Re-executed as a fake ACP agent by a configured provider.
	if os.Getenv(fakeacp.EnvFake) == "1" {
		os.Exit(fakeacp.Main())
	}
	// Re-executed as the echo floor of the benchmarks.
	if os.Getenv(envEchoFloor) == "1" {
		os.Exit(echoFloorMain())
	}
	dir, err := os.MkdirTemp("", "mcp-subagent-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "mcp-subagent")
	buildArgs := []string{"build", "-o", binary}
	if raceBuild {
		// Every server process the tests start (sessions, relays, daemons
		// they spawn) writes its race reports under raceDir; any report
		// fails the suite.
		buildArgs = append(buildArgs, "-race")
		raceDir = filepath.Join(dir, "race")
		if err := os.Mkdir(raceDir, 0o700); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("GORACE", "log_path="+filepath.Join(raceDir, "report"))
	}
	build := exec.Command("go", append(buildArgs, mainPkg)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the server:", err)
		os.Exit(1)
	}
	code := m.Run()
	// A test that failed before its cleanup may leave a daemon of ours
	// behind: no process outlives the suite.
	if left := processesOf(binary); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "killing %d processes of the server the tests left behind: %v\n", len(left), left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if reports := raceReports(); reports != "" {
		fmt.Fprintf(os.Stderr, "the server binary reported data races:\n%s", reports)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// raceDir collects the race reports of a -race server binary.
var raceDir string

// raceReports is every race report the server processes wrote.
func raceReports() string {
	if raceDir == "" {
		return ""
	}
	ents, _ := os.ReadDir(raceDir)
	var b strings.Builder
	for _, e := range ents {
		if data, err := os.ReadFile(filepath.Join(raceDir, e.Name())); err == nil && len(data) > 0 {
			fmt.Fprintf(&b, "== %s\n%s\n", e.Name(), data)
		}
	}
	return b.String()
}

// processesOf lists live processes running the executable at path.
func processesOf(path string) []int {
	return processesWhere(func(dir string) bool {
		exe, err := os.Readlink(filepath.Join(dir, "exe"))
		return err == nil && exe == path
	})
}

// processesWhere lists the processes whose /proc directory match accepts.
func processesWhere(match func(procDir string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && match(filepath.Join("/proc", e.Name())) {
			out = append(out, pid)
		}
	}
	return out
}

// syncBuffer collects a subprocess's stderr for assertions; with log set,
// String also returns that file (the daemon's log, where a relayed
// session's server logs go).
type syncBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	log string
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.b.String()
	if s.log != "" {
		if b, err := os.ReadFile(s.log); err == nil {
			out += string(b)
		}
	}
	return out
}

// stopDaemon stops the daemon of dataDir, if one runs, and waits until it
// has let go of the directory.
func stopDaemon(t testing.TB, dataDir string) {
	t.Helper()
	out, err := exec.Command(binary, "daemon", "stop", "--data-dir", dataDir).CombinedOutput()
	if err != nil {
		t.Errorf("stopping the daemon of %s: %v\n%s", dataDir, err, out)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// instance is one running instance of the binary and a connected client.
type instance struct {
	client    *client.Client
	stderr    *syncBuffer
	workspace string
	dataDir   string
	url       string      // HTTP only
	token     string      // HTTP only: the bearer token its client sends (configured, or the minted one)
	proc      *serverProc // HTTP only: the server process, which a test may kill
	relayed   bool        // stdio relayed to the data directory's daemon
	notes     chan mcp.JSONRPCNotification
}

type serverOpts struct {
	http   bool
	config string // JSON config; empty: none
	env    []string
	args   []string
	token  string // bearer token the HTTP client sends
	// clientOpts configure the stdio client (e.g. a roots handler).
	clientOpts []client.ClientOption
	// dataDir and workspace reuse a previous instance's (for restarts);
	// empty: fresh temporary directories.
	dataDir, workspace string
	bin                string // the server binary; empty: the one built for the tests
	// wrap is a command the server runs under (e.g. strace and its
	// arguments); the server's command line follows it.
	wrap []string
}

func serverEnv(fake *fakeopenai.Server, extra []string) []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"OPENAI_API_KEY=test-key",
		"MCP_SUBAGENT_MODEL=fake-model",
	}
	if fake != nil {
		env = append(env, "OPENAI_BASE_URL="+fake.URL())
	}
	if v, ok := os.LookupEnv("GORACE"); ok {
		env = append(env, "GORACE="+v)
	}
	return append(env, extra...)
}

// start runs the binary against fake over stdio or HTTP and connects an
// mcp-go client with the legacy handshake real clients use.
func start(t testing.TB, fake *fakeopenai.Server, o serverOpts) *instance {
	t.Helper()
	ws := t.TempDir()
	if real, err := filepath.EvalSymlinks(ws); err == nil {
		ws = real
	}
	dataDir := o.dataDir
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	args := []string{"serve", "--log-format", "json", "--log-level", "debug"}
	if !slices.Contains(o.args, "--ephemeral") {
		args = append(args, "--data-dir", dataDir)
	}
	args = append(args, o.args...)
	if o.config != "" {
		p := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(p, []byte(o.config), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	if o.workspace != "" {
		ws = o.workspace
	}
	s := &instance{stderr: &syncBuffer{}, workspace: ws, dataDir: dataDir, notes: make(chan mcp.JSONRPCNotification, 1000)}
	env := serverEnv(fake, o.env)
	s.relayed = !o.http && !slices.Contains(o.args, "--ephemeral") && !slices.Contains(o.args, "--no-daemon")
	if s.relayed {
		// The session relays to the data directory's daemon, which outlives
		// it: stop it when the test ends (after the client closed).
		s.stderr.log = filepath.Join(dataDir, "daemon.log")
		t.Cleanup(func() { stopDaemon(t, dataDir) })
	}
	bin := binary
	if o.bin != "" {
		bin = o.bin
	}
	if !o.http {
		tr := transport.NewStdioWithOptions(bin, env, args,
			transport.WithCommandStderrWriter(s.stderr),
			transport.WithCommandFunc(func(ctx context.Context, command string, env []string, args []string) (*exec.Cmd, error) {
				if len(o.wrap) > 0 {
					command, args = o.wrap[0], append(append(o.wrap[1:len(o.wrap):len(o.wrap)], command), args...)
				}
				cmd := exec.CommandContext(ctx, command, args...)
				cmd.Env, cmd.Dir = env, ws
				return cmd, nil
			}))
		if err := tr.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.client = client.NewClient(tr, o.clientOpts...)
		if err := s.client.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	} else {
		var minted string
		s.proc, s.url, minted = launchHTTP(t, append(args, "--http", "127.0.0.1:0"), env, ws, s.stderr)
		s.token = o.token
		if s.token == "" { // tokenless serve --http: the token it minted in the data directory
			s.token = minted
		}
		// Like real clients on the legacy protocol (the one Claude Code and
		// Codex speak, pinned below), hold the GET stream open for
		// server-initiated notifications (pushed notices).
		//lint:ignore SA1019 the legacy GET stream is what real clients use
		opts := []transport.StreamableHTTPCOption{transport.WithContinuousListening()}
		if s.token != "" {
			opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + s.token}))
		}
		c, err := client.NewStreamableHttpClient(s.url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.client = c
	}
	t.Cleanup(func() { s.client.Close() })
	s.client.OnNotification(func(n mcp.JSONRPCNotification) {
		select {
		case s.notes <- n:
		default:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "e2e", Version: "1"}
	if _, err := s.client.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v; stderr:\n%s", err, s.stderr)
	}
	return s
}

// stop ends the server: the client closes, which ends an in-process
// server; a relayed session's daemon is stopped as well.
func (s *instance) stop(t testing.TB) {
	t.Helper()
	s.client.Close()
	if s.relayed {
		stopDaemon(t, s.dataDir)
	}
}

// serverProc is a server process the test owns, so it can kill it.
type serverProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *serverProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop asks the process to stop (SIGTERM) and waits, killing it after 10s.
func (p *serverProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// launchHTTP starts the server over HTTP and returns it with the URL it
// logged; the test's cleanup stops it.
func launchHTTP(t testing.TB, args, env []string, dir string, stderr *syncBuffer) (proc *serverProc, url, token string) {
	t.Helper()
	return launchHTTPOf(t, binary, args, env, dir, stderr)
}

// launchHTTPOf is launchHTTP with another build of the server. token is
// the bearer token a tokenless serve --http minted (read from the file its
// log names before the URL); "" when the config names tokens.
func launchHTTPOf(t testing.TB, bin string, args, env []string, dir string, stderr *syncBuffer) (proc *serverProc, url, token string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, dir
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(stderr, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); pw.Close(); close(p.done) }()
	t.Cleanup(p.stop)
	type served struct{ url, tokenFile string }
	urlc := make(chan served, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		var tokenFile string
		for sc.Scan() {
			var line struct {
				URL       string `json:"url"`
				TokenFile string `json:"token_file"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			if line.TokenFile != "" {
				tokenFile = line.TokenFile
			}
			if line.URL != "" {
				urlc <- served{line.URL, tokenFile}
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case s := <-urlc:
		if s.tokenFile != "" {
			b, err := os.ReadFile(s.tokenFile)
			if err != nil {
				t.Fatalf("the minted HTTP token: %v", err)
			}
			token = strings.TrimSpace(string(b))
		}
		return p, s.url, token
	case <-time.After(15 * time.Second):
		t.Fatalf("the HTTP server did not report its address; stderr:\n%s", stderr)
		return nil, "", ""
	}
}

// bearer is the Authorization header of s's HTTP client, for raw requests.
func (s *instance) bearer() map[string]string {
	if s.token == "" {
		return map[string]string{}
	}
	return map[string]string{"Authorization": "Bearer " + s.token}
}

// call invokes a tool and fails the test on a protocol error.
func (s *instance) call(t testing.TB, ctx context.Context, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := s.client.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v; stderr:\n%s", name, err, s.stderr)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// foreground decodes a subagent result's structuredContent.
type foreground struct {
	Kind       string          `json:"kind"`
	AgentID    string          `json:"agent_id"`
	StopReason string          `json:"stop_reason"`
	Output     string          `json:"output"`
	Structured json.RawMessage `json:"structured"`
	Diagnostic string          `json:"diagnostic"`
	Usage      struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

func structured(t *testing.T, r *mcp.CallToolResult) foreground {
	t.Helper()
	var raw []byte
	var err error
	if r.RawStructuredContent != nil {
		raw = r.RawStructuredContent
	} else if raw, err = json.Marshal(r.StructuredContent); err != nil {
		t.Fatal(err)
	}
	var fg foreground
	if err := json.Unmarshal(raw, &fg); err != nil {
		t.Fatalf("structuredContent %s: %v", raw, err)
	}
	return fg
}

// transports runs f over stdio and over HTTP.
func transports(t *testing.T, f func(t *testing.T, http bool)) {
	for _, http := range []bool{false, true} {
		name := "stdio"
		if http {
			name = "http"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, http)
		})
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
