//go:build e2e

package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
