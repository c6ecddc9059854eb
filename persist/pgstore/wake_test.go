//go:build postgres

package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/pgtest"
	"github.com/mcp-subagent/mcp-subagent/persist/pgstore"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A wake-up is not lost across a restart of the server: a NOTIFY sent
// while the watcher's connection is down never arrives, so the watcher is
// woken (spuriously) once it has reconnected, and wake-ups flow again.
func TestWakeSurvivesServerRestart(t *testing.T) {
	srv := pgtest.New(t)
	dsn := srv.DSN(t)
	w, err := pgstore.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s, err := pgstore.Open(ctx, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WriteChild(ctx, "c", seam.ChildWrite{Create: &seam.NewChild{Header: header("c"), Descriptor: descriptor()}}); err != nil {
		t.Fatal(err)
	}
	c, stop, err := w.Watch(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv.Stop(t)
	select {
	case <-c:
		t.Fatal("woken while the server is down")
	default:
	}
	srv.Start(t)
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher was not woken after its wake-up connection came back")
	}
	// The watcher listens again: a write through the other handle wakes it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The writer's pool may still hand out a connection the restart
		// broke; its write fails and is retried.
		err := s.WriteChild(ctx, "c", seam.ChildWrite{Enqueue: []seam.QueuedMessage{{ID: "m" + time.Now().Format("150405.000000000")}}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writing after the restart: %v", err)
		}
	}
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("a write after the restart did not wake the watcher")
	}
}

// The first Watch waits, bounded by its ctx, for the wake-up connection;
// a closed store refuses to watch.
func TestWatchWaitsForItsConnection(t *testing.T) {
	srv := pgtest.New(t)
	s, err := pgstore.Open(ctx, srv.DSN(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, _, err := s.Watch(short, "c"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Watch while the server is down = %v; want the ctx's deadline", err)
	}
	s.Close()
	if _, _, err := s.Watch(ctx, "c"); !errors.Is(err, pgstore.ErrClosed) {
		t.Fatalf("Watch after Close = %v; want ErrClosed", err)
	}
}
