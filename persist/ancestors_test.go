package persist

import (
	"context"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcp-subagent/mcp-subagent/seam"
)

// A file written before the by_ancestor index (it has by_parent only) has
// the index built when it is opened: its descendants list and page as a
// new file's do.
func TestOpenBuildsTheAncestorIndexOfAnOlderFile(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	ctx := context.Background()
	root := seam.PrincipalAddress("local")
	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, c := range []struct{ id, parent string }{{"a", root}, {"b", root}, {"a1", "a"}, {"a1x", "a1"}, {"b1", "b"}} {
		h := seam.Header{ID: c.id, Parent: c.parent, Principal: "local", Depth: 1, DepthCap: 3, Mode: seam.ModeContinuable,
			Provider: "spawn", Label: c.id, Cwd: "/w", CreatedAt: base.Add(time.Duration(i) * time.Second)}
		d := seam.Descriptor{Version: seam.DescriptorVersion, Mode: seam.ModeContinuable, Provider: "spawn", Label: c.id}
		if err := s.WriteChild(ctx, c.id, seam.ChildWrite{Create: &seam.NewChild{Header: h, Descriptor: d}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketByAncestor) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	ids := func(r string) []string {
		ls, err := s.Descendants(ctx, r, seam.Page{})
		if err != nil {
			t.Fatalf("Descendants(%s): %v", r, err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Header.ID)
		}
		return out
	}
	if got, want := ids(root), []string{"a", "b", "a1", "a1x", "b1"}; !slices.Equal(got, want) {
		t.Errorf("Descendants(root) after the upgrade = %v, want %v", got, want)
	}
	if got, want := ids("a"), []string{"a1", "a1x"}; !slices.Equal(got, want) {
		t.Errorf("Descendants(a) after the upgrade = %v, want %v", got, want)
	}
}
