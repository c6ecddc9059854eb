package workspace

import (
	"os"
	"testing"

	"github.com/mcp-subagent/mcp-subagent/internal/subreaper"
)

func TestMain(m *testing.M) {
	subreaper.Main() // run_shell's supervisor, when re-executed as one
	os.Exit(m.Run())
}
