//go:build e2e

package main

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
	"github.com/mcp-subagent/mcp-subagent/manager"
	"github.com/mcp-subagent/mcp-subagent/persist/memstore"
)

// The loopback listener starts on the first URL asked for, keeps one URL
// per principal, answers only loopback Host names, and close stops it.
func TestWebViewListener(t *testing.T) {
	m := manager.New(manager.Options{Store: memstore.New()})
	defer func() { _ = m.Close(context.Background()) }()
	w := newWebView(m, nil, slog.New(slog.DiscardHandler))
	a, err := w.url("local")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := w.url("local")
	other, _ := w.url("alice")
	if a.URL != again.URL || a.URL == other.URL || !strings.HasPrefix(a.URL, "http://127.0.0.1:") {
		t.Fatalf("URLs: local %q then %q, alice %q", a.URL, again.URL, other.URL)
	}
	if code := getStatus(t, a.URL, ""); code != http.StatusOK {
		t.Errorf("GET the view: %d", code)
	}
	if code := getStatus(t, a.URL, "rebound.example:80"); code != http.StatusForbidden {
		t.Errorf("GET with a foreign Host: %d, want 403", code)
	}
	w.close()
	if _, err := w.url("local"); err == nil {
		t.Error("a closed view gave a URL")
	}
	if _, err := http.Get(a.URL); err == nil {
		t.Error("the listener still answers after close")
	}
}

func getStatus(t *testing.T, u, host string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if host != "" {
		req.Host = host
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// --open hands the URL to $BROWSER (with %s replaced, or appended); with
// neither $BROWSER nor xdg-open it says what to do.
func TestOpenBrowser(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "opened")
	script := filepath.Join(dir, "browser")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" > "+out+".tmp && mv "+out+".tmp "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ browser, want string }{
		{script, "http://127.0.0.1:1/?token=x"},
		{script + " --new-window %s", "--new-window http://127.0.0.1:1/?token=x"},
	} {
		os.Remove(out)
		t.Setenv("BROWSER", c.browser)
		if err := openBrowser("http://127.0.0.1:1/?token=x"); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if !waitFor(10*time.Second, func() bool {
			var err error
			got, err = os.ReadFile(out)
			return err == nil
		}) {
			t.Fatalf("BROWSER=%q was not run", c.browser)
		}
		if strings.TrimSpace(string(got)) != c.want {
			t.Errorf("BROWSER=%q got %q, want %q", c.browser, got, c.want)
		}
	}
	t.Setenv("BROWSER", "")
	t.Setenv("PATH", dir) // no xdg-open here
	if err := openBrowser("http://127.0.0.1:1/"); err == nil || !strings.Contains(err.Error(), "$BROWSER") {
		t.Errorf("with no browser: %v, want an error naming $BROWSER", err)
	}
}

// A stream open on the view does not hold the daemon up: daemon stop ends
// it (the browser sees the stream close) and the daemon exits.
func TestWebViewEndsWithTheDaemon(t *testing.T) {
	dataDir := t.TempDir()
	t.Cleanup(func() { stopDaemon(t, dataDir) })
	s := &instance{dataDir: dataDir, workspace: t.TempDir()}
	u, err := url.Parse(uiURL(t, s))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/api/tree"
	res, err := http.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: snapshot\n" {
		t.Fatalf("the stream began %q, %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := daemon.Status(ctx, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Stop(ctx, dataDir, daemon.Hello{Version: version, Op: "stop"}); err != nil {
		t.Fatalf("daemon stop with a view stream open: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := br.ReadString('\n'); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the view's stream outlived the daemon")
	}
	// The daemon process itself exits: closing the view did not wait
	// forever on its stream.
	if !waitFor(20*time.Second, func() bool {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(w.PID), "stat"))
		return err != nil || strings.Contains(string(stat), ") Z ")
	}) {
		t.Fatalf("the daemon (pid %d) did not exit; its log:\n%s", w.PID, readFile(daemon.LogPath(dataDir)))
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// `mcp-subagent ui --open`, the built binary against a running daemon,
// prints the view's URL and hands that same URL to $BROWSER, which then
// loads the page.
func TestUIOpenThroughTheBinary(t *testing.T) {
	s := start(t, nil, serverOpts{})
	dir := t.TempDir()
	opened := filepath.Join(dir, "opened")
	script := filepath.Join(dir, "browser")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$1\" > "+opened+".tmp && mv "+opened+".tmp "+opened+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := cliCommand(ctx, s, "ui", "--open")
	cmd.Env = append(cmd.Env, "BROWSER="+script)
	out, err := cmd.Output()
	printed := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(printed, "http://127.0.0.1:") {
		t.Fatalf("ui --open: %v, printed %q", err, out)
	}
	var got []byte
	if !waitFor(10*time.Second, func() bool {
		got, err = os.ReadFile(opened)
		return err == nil
	}) {
		t.Fatal("$BROWSER was not run")
	}
	if u := strings.TrimSpace(string(got)); u != printed {
		t.Fatalf("$BROWSER got %q, ui printed %q", u, printed)
	}
	if code := getStatus(t, printed, ""); code != http.StatusOK {
		t.Errorf("GET the opened URL: %d", code)
	}
}
