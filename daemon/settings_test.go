package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSettingsDiffers(t *testing.T) {
	daemonEnv := map[string]string{"OPENAI_BASE_URL": "http://a/v1", "OPENAI_API_KEY": "k1", "PATH": "/bin"}
	lookup := func(n string) (string, bool) { v, ok := daemonEnv[n]; return v, ok }
	names := []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "PATH", "MCP_SUBAGENT_MODEL"}
	for _, tc := range []struct {
		name     string
		s        *Settings
		config   string
		wantVars []string
		wantCfg  bool
	}{
		{"a client that sends no settings differs in nothing", nil, "/other.json", nil, false},
		{"the same values and config differ in nothing",
			&Settings{Names: names, Env: map[string]string{"OPENAI_BASE_URL": "http://a/v1", "OPENAI_API_KEY": "k1", "PATH": "/bin"}, Config: "/c.json"}, "/c.json", nil, false},
		{"another value, a variable set only in the session, one unset in it, another config",
			&Settings{Names: names, Env: map[string]string{"OPENAI_BASE_URL": "http://b/v1", "MCP_SUBAGENT_MODEL": "m", "PATH": "/bin"}, Config: "/b.json"}, "/c.json",
			[]string{"MCP_SUBAGENT_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars, cfg := tc.s.Differs(lookup, tc.config)
			if !reflect.DeepEqual(vars, tc.wantVars) || cfg != tc.wantCfg {
				t.Errorf("Differs = %q, %v; want %q, %v", vars, cfg, tc.wantVars, tc.wantCfg)
			}
		})
	}
}

// syncLog is a log destination the daemon's goroutines write to.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A session's hello carries its settings to Options.Session; one that
// differs from the daemon's own is said once in the log and in status
// while it is connected, by variable names only, never values.
func TestAHelloCarriesTheSessionsSettings(t *testing.T) {
	dir := t.TempDir()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan SessionInfo, 1)
	var logs syncLog
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Reason, 1)
	daemonEnv := map[string]string{"OPENAI_BASE_URL": "http://daemon/v1", "OPENAI_API_KEY": "daemon-key"}
	go func() {
		serve := serveMCP(newTestServer().ms)
		done <- l.Serve(ctx, Options{Version: "test", Config: "/daemon.json",
			Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
			LookupEnv: func(n string) (string, bool) { v, ok := daemonEnv[n]; return v, ok },
			Serve: func(ctx context.Context, c *SessionConn) error {
				got <- c.SessionInfo
				return serve(ctx, c)
			}})
	}()
	t.Cleanup(func() { cancel(); <-done; _ = l.Close() })

	const secret = "sk-session-secret-value"
	sent := &Settings{Names: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"},
		Env:     map[string]string{"OPENAI_BASE_URL": "http://session/v1", "OPENAI_API_KEY": secret},
		Secrets: []string{"OPENAI_API_KEY"}, Config: "/daemon.json"}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	c, err := Connect(cctx, ConnectOptions{DataDir: dir, Hello: Hello{PID: 4242, Settings: sent}})
	if err != nil {
		t.Fatal(err)
	}
	var info SessionInfo
	select {
	case info = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the session never reached Options.Serve")
	}
	if !reflect.DeepEqual(info.Settings, sent) {
		t.Errorf("Options.Serve got settings %+v; want the hello's %+v", info.Settings, sent)
	}
	w, err := Status(cctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []SettingsDiff{{Session: info.ID, ClientPID: 4242, Vars: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"}}}
	if !reflect.DeepEqual(w.Differing, want) {
		t.Errorf("status Differing = %+v; want %+v", w.Differing, want)
	}
	lines := strings.Count(logs.String(), "settings differ from the daemon's own")
	if lines != 1 || !strings.Contains(logs.String(), "OPENAI_BASE_URL") || strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), "http://session") {
		t.Errorf("the log should say once which variables differ, without values:\n%s", logs.String())
	}

	// Gone, it is no longer listed.
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, err := Status(cctx, dir)
		if err == nil && len(w.Differing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an ended session is still listed: %+v %v", w.Differing, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
