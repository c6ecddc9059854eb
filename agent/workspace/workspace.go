package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
	"github.com/mcp-subagent/mcp-subagent/llm"
)

// Tool names, in the order Tools returns them.
const (
	nameReadFile  = "read_file"
	nameListDir   = "list_dir"
	nameSearch    = "search"
	nameWriteFile = "write_file"
	nameRunShell  = "run_shell"
)

// Defaults for the zero values of [Options].
const (
	DefaultShellTimeout   = 60 * time.Second
	DefaultMaxReadBytes   = 256 << 10
	DefaultMaxOutputBytes = 64 << 10
)

// maxSearchMatches is the number of matches after which search stops.
const maxSearchMatches = 200

// Options configures the workspace tools.
type Options struct {
	// Root is the absolute path of an existing directory. The file tools
	// can reach nothing outside it; run_shell starts in it. Required.
	Root string
	// Shell exposes run_shell, confined by Sandbox. It is off by default.
	Shell bool
	// Sandbox confines run_shell (package sandbox). Its Mode zero means
	// sandbox.WorkspaceWrite; sandbox.ReadOnly makes the workspace
	// read-only too; sandbox.Unconfined runs commands with the server's
	// full authority (see the package documentation). Workspace is always
	// Root. TempDir is where each command's own temporary directory is
	// made (zero: os.TempDir()); CacheDir, when set, is made if missing.
	Sandbox sandbox.Policy
	// ShellTimeout bounds one run_shell call. Zero: DefaultShellTimeout.
	ShellTimeout time.Duration
	// MaxReadBytes caps the text one read_file call returns; the rest is
	// cut with a note saying where to continue. Zero: DefaultMaxReadBytes.
	MaxReadBytes int
	// MaxOutputBytes caps the output of list_dir, search and run_shell,
	// cut with a note. Zero: DefaultMaxOutputBytes.
	MaxOutputBytes int
}

// Names returns the names of the tools [Tools] returns, in the same order,
// for validating a tool filter before a child starts.
func Names(shell bool) []string {
	names := []string{nameReadFile, nameListDir, nameSearch, nameWriteFile}
	if shell {
		names = append(names, nameRunShell)
	}
	return names
}

// Tools returns the workspace tools confined to opts.Root: read_file,
// list_dir, search, write_file, and run_shell when opts.Shell is set. It
// fails if Root is not the absolute path of an existing directory or an
// option is negative. The tools are safe for concurrent use and hold no
// open files between calls.
func Tools(opts Options) ([]agent.Tool, error) {
	w, err := newWorkspace(opts)
	if err != nil {
		return nil, err
	}
	tools := []agent.Tool{w.readFileTool(), w.listDirTool(), w.searchTool(), w.writeFileTool()}
	if opts.Shell {
		t, err := w.runShellTool()
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// workspace is the shared, immutable state of one tool set.
type workspace struct {
	confinement
	sandbox      sandbox.Policy
	shellTimeout time.Duration
	maxRead      int
	maxOutput    int
}

func newWorkspace(opts Options) (*workspace, error) {
	if opts.Root == "" {
		return nil, errors.New("workspace: Root is required")
	}
	if !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("workspace: Root %q is not an absolute path", opts.Root)
	}
	if opts.ShellTimeout < 0 || opts.MaxReadBytes < 0 || opts.MaxOutputBytes < 0 {
		return nil, errors.New("workspace: ShellTimeout, MaxReadBytes and MaxOutputBytes must not be negative")
	}
	root := filepath.Clean(opts.Root)
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("workspace: Root %q: %w", opts.Root, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("workspace: Root %q: %w", opts.Root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("workspace: Root %q is not a directory", opts.Root)
	}
	pol := opts.Sandbox
	if pol.Mode == "" {
		pol.Mode = sandbox.WorkspaceWrite
	}
	if opts.Shell {
		if m, err := sandbox.ParseMode(string(pol.Mode)); err != nil || m == sandbox.Off {
			return nil, fmt.Errorf("workspace: Sandbox.Mode %q: with Shell, use read-only, workspace-write or unconfined", pol.Mode)
		}
	}
	if pol.TempDir == "" {
		pol.TempDir = os.TempDir()
	}
	pol.Workspace = real
	w := &workspace{
		confinement:  confinement{root: root, real: real},
		sandbox:      pol,
		shellTimeout: opts.ShellTimeout,
		maxRead:      opts.MaxReadBytes,
		maxOutput:    opts.MaxOutputBytes,
	}
	if w.shellTimeout == 0 {
		w.shellTimeout = DefaultShellTimeout
	}
	if w.maxRead == 0 {
		w.maxRead = DefaultMaxReadBytes
	}
	if w.maxOutput == 0 {
		w.maxOutput = DefaultMaxOutputBytes
	}
	return w, nil
}

// tool is an agent.Tool whose arguments are checked against params before
// run sees them.
type tool struct {
	name   string
	desc   string
	params []param
	schema json.RawMessage
	run    func(ctx context.Context, a args) (string, error)
}

func newTool(name, desc string, params []param, run func(context.Context, args) (string, error)) *tool {
	return &tool{name: name, desc: desc, params: params, schema: schema(params), run: run}
}

func (t *tool) Def() llm.ToolDef {
	return llm.ToolDef{Name: t.name, Description: t.desc, Parameters: slices.Clone(t.schema)}
}

func (t *tool) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	a, err := decodeArgs(t.name, t.params, raw)
	if err != nil {
		return "", err
	}
	return t.run(ctx, a)
}
