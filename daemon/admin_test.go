package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// serveFor runs a daemon on a fresh data directory with admin until the
// test ends.
func serveFor(t *testing.T, admin func(context.Context, AdminRequest) (any, error)) string {
	t.Helper()
	dir := t.TempDir()
	l, err := Listen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Reason, 1)
	go func() { done <- l.Serve(ctx, Options{Version: "test", Admin: admin}) }()
	t.Cleanup(func() { cancel(); <-done; _ = l.Close() })
	return dir
}

// An admin op reaches Options.Admin with the hello's principal (local when
// it names none) and arguments; its result or its error comes back; an
// unknown op is refused.
func TestAdminOperations(t *testing.T) {
	got := make(chan AdminRequest, 4)
	dir := serveFor(t, func(_ context.Context, req AdminRequest) (any, error) {
		got <- req
		if req.Op == OpCompact {
			return nil, errors.New("the store is damaged")
		}
		return map[string]int{"pruned": 3}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	co := ConnectOptions{DataDir: dir}
	raw, err := Admin(ctx, co, Hello{Op: OpPrune, Args: json.RawMessage(`{"dry_run":true}`)})
	if err != nil || string(raw) != `{"pruned":3}` {
		t.Fatalf("prune: %s, %v", raw, err)
	}
	if req := <-got; req.Op != OpPrune || req.Principal != "local" || string(req.Args) != `{"dry_run":true}` {
		t.Errorf("Admin got %+v", req)
	}
	_, err = Admin(ctx, co, Hello{Op: OpCompact, Principal: "alice"})
	var ae *AdminError
	if !errors.As(err, &ae) || ae.Op != OpCompact || ae.Message != "the store is damaged" {
		t.Errorf("compact: %v, want the handler's error", err)
	}
	if req := <-got; req.Principal != "alice" {
		t.Errorf("the hello's principal became %q", req.Principal)
	}
	if _, err := Admin(ctx, co, Hello{Op: "delete-everything"}); err == nil {
		t.Error("an unknown admin op was sent")
	}
}

// A daemon without an Admin refuses admin ops in its welcome.
func TestAdminRefusedWithoutAHandler(t *testing.T) {
	dir := serveFor(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Admin(ctx, ConnectOptions{DataDir: dir}, Hello{Op: OpPrune})
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("prune on a daemon without admin: %v, want a refusal", err)
	}
}
