package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/persist"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// storeWithChildren writes a session store of three children under dir.
func storeWithChildren(t *testing.T, dir string) []string {
	t.Helper()
	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ids []string
	for i, label := range []string{"one", "two", "three"} {
		id := "agent-doctor-" + label
		h := seam.Header{ID: id, Parent: "principal:local", Principal: "local", Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable,
			Provider: "spawn", Label: label, Cwd: "/work", CreatedAt: time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)}
		d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn", Label: label}
		ev := []agent.Event{{Seq: 0, Kind: agent.EventTurnStart, Time: h.CreatedAt, Turn: 1}}
		// Left mid-turn and claimed, as a crash leaves a child.
		w := seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}, Claim: &seam.Owner{ID: "test", Expires: time.Now()}, Events: ev}
		if err := st.WriteChild(context.Background(), id, w); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// doctor copies the readable children into a fresh store, says what it
// could not read, and keeps the original.
func TestDoctorCopiesReadableChildrenAndKeepsTheOriginal(t *testing.T) {
	dir := t.TempDir()
	ids := storeWithChildren(t, dir)
	// The second child's header is damaged.
	db, err := bolt.Open(filepath.Join(dir, persist.FileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("children")).Put([]byte(ids[1]), []byte("\x00not json"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"doctor", "--data-dir", dir}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("doctor exited %d: %s", code, stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "2 children copied whole") || !strings.Contains(out, ids[1]) || !strings.Contains(out, ".corrupt-") {
		t.Errorf("doctor's report does not say what it copied, what it lost and where the original is:\n%s", out)
	}
	backups, _ := filepath.Glob(filepath.Join(dir, persist.FileName+".corrupt-*"))
	if len(backups) != 1 {
		t.Fatalf("backups = %v, want the original kept once", backups)
	}
	st, err := persist.Open(dir, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, id := range ids {
		_, err := st.Header(context.Background(), id)
		if (i == 1) != (err != nil) {
			t.Errorf("child %s in the repaired store: %v", id, err)
		}
	}
}

// A server started on a damaged store file fails with an error naming the
// file and the doctor command.
func TestServeOnADamagedStoreNamesTheFileAndDoctor(t *testing.T) {
	dir := t.TempDir()
	storeWithChildren(t, dir)
	path := filepath.Join(dir, persist.FileName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*4096; i++ { // both meta pages
		data[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--no-daemon", "--data-dir", dir, "--log-format", "text"}, strings.NewReader(""), &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), path) || !strings.Contains(stderr.String(), "mcp-subagent doctor") {
		t.Errorf("serve exited %d; stderr does not name the file and the doctor command:\n%s", code, stderr.String())
	}
}
