// Package archtest checks the arrows between packages: which packages may
// link what. It has no code of its own, only tests.
package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mcp-subagent/mcp-subagent/"

// forbidden are the module paths the core may not link: the vendor model
// SDKs (only llm/openai and llm/anthropic speak to them) and the MCP
// libraries (only the MCP edge speaks MCP).
var forbidden = []string{
	"github.com/openai/openai-go",
	"github.com/anthropics/anthropic-sdk-go",
	"github.com/mark3labs/mcp-go",
	"github.com/modelcontextprotocol/go-sdk",
}

// core are the packages that hold the contracts, the lifecycle and its
// policies; a store backend or a provider must be able to use them without
// linking a vendor SDK or an MCP library.
var core = []string{
	"llm",
	"llm/transport",
	"agent",
	"manager",
	"manager/admission",
	"manager/budget",
	"manager/listing",
	"manager/questions",
	"manager/retention",
	"manager/validate",
	"manager/wording",
	"manager/worktrees",
	"persist",
	"persist/memstore",
	"tasks/taskstore",
	"seam",
}

// deps returns the import paths pkg links (go list -deps, tests excluded).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	trackInputs(t)
	gobin := goBinary(t)
	out, err := exec.Command(gobin, "list", "-deps", module+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// linked returns the forbidden module paths pkg links, each with one of
// its packages that pkg links, e.g. "github.com/mark3labs/mcp-go (…/mcp)".
func linked(t *testing.T, pkg string) []string {
	var bad []string
	seen := map[string]bool{}
	for _, d := range deps(t, pkg) {
		for _, f := range forbidden {
			if (d == f || strings.HasPrefix(d, f+"/")) && !seen[f] {
				seen[f] = true
				bad = append(bad, f+" ("+d+")")
			}
		}
	}
	return bad
}

func TestCoreLinksNoVendorSDKAndNoMCPLibrary(t *testing.T) {
	for _, pkg := range core {
		t.Run(pkg, func(t *testing.T) {
			if bad := linked(t, pkg); len(bad) > 0 {
				t.Errorf("%s links %s; the core must link no vendor SDK and no MCP library (see the package docs of llm and tasks/taskstore)", pkg, strings.Join(bad, ", "))
			}
		})
	}
}

// TestTheDaemonLinksNoMCPLibrary: the daemon knows connections and
// processes; MCP on a session's connection is the edge's, which the
// command hands it through daemon.Options.Serve.
func TestTheDaemonLinksNoMCPLibrary(t *testing.T) {
	if bad := linked(t, "daemon"); len(bad) > 0 {
		t.Errorf("daemon links %s; MCP is the edge's (edge.Server.ServeConn, wired through daemon.Options.Serve)", strings.Join(bad, ", "))
	}
}

// TestTheProbeSeesWhatIsLinked keeps the check honest: the vendor clients
// and the MCP edge link what the core must not, and the probe must see
// it, or an empty answer would read as clean.
func TestTheProbeSeesWhatIsLinked(t *testing.T) {
	for pkg, want := range map[string]string{
		"llm/openai":    "github.com/openai/openai-go/v3",
		"llm/anthropic": "github.com/anthropics/anthropic-sdk-go/v2",
		"edge":          "github.com/mark3labs/mcp-go/mcp",
	} {
		if bad := linked(t, pkg); !strings.Contains(strings.Join(bad, " "), want) {
			t.Errorf("%s: the probe found %v, want %s among them", pkg, bad, want)
		}
	}
}

// ours returns the packages of this module that pkg links, pkg itself
// left out.
func ours(t *testing.T, pkg string) []string {
	var out []string
	for _, d := range deps(t, pkg) {
		if strings.HasPrefix(d, module) && d != module+pkg {
			out = append(out, d)
		}
	}
	return out
}

// TestTheSeamImportsNothingOfOurs: seam is the contract a store backend or
// a provider is written against, so it links nothing of this module, not
// even a leaf (seam's package doc says which types that puts in seam).
// Agent, which aliases seam's journal types, must show up linking seam, or
// an empty answer would read as clean.
func TestTheSeamImportsNothingOfOurs(t *testing.T) {
	if got := ours(t, "seam"); len(got) > 0 {
		t.Errorf("seam links %s; it must import nothing of this module (give it its own type, converting at the boundary, as it does for llm.Usage and worktree.Info)", strings.Join(got, ", "))
	}
	if got := ours(t, "agent"); !slices.Contains(got, module+"seam") {
		t.Errorf("agent: the probe found %v, want %sseam among them", got, module)
	}
}

// goBinary is the go command that runs this test: the one on PATH, as
// go test leaves it for its children (GOROOT/bin first).
func goBinary(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	return gobin
}
