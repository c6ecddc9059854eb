//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/daemon"
)

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
	if code, _, stderr := runOut(t, 20*time.Second, nil, "daemon", "stop", "--data-dir", dataDir); code != 0 {
		t.Fatalf("daemon stop with a view stream open: exit %d\n%s", code, stderr)
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
	if res, err := http.Get(printed); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("GET the opened URL: %v %v", res, err)
	} else {
		res.Body.Close()
	}
}
