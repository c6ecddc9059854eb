package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/mcp-subagent/mcp-subagent/internal/sandbox"
)

// ConfineConfig is a provider's `confine`: a mode name ("workspace-write",
// "unconfined") or an object {mode, read_roots, write_roots}. Absent:
// "workspace-write" where the kernel can confine, else "unconfined".
type ConfineConfig struct {
	Mode       string   `json:"mode,omitempty"`
	ReadRoots  []string `json:"read_roots,omitempty"`
	WriteRoots []string `json:"write_roots,omitempty"`
}

// UnmarshalJSON takes the two forms.
func (c *ConfineConfig) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var m string
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		*c = ConfineConfig{Mode: m}
		return nil
	}
	type plain ConfineConfig
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*c = ConfineConfig(p)
	return nil
}

// check refuses what is wrong whatever the kernel: a mode other than the
// two, a relative or missing root, a write root that is / or holds the
// home directory. The errors name the field.
func (c *ConfineConfig) check(i int, home string) error {
	if c == nil {
		return nil
	}
	prefix := "providers[" + strconv.Itoa(i) + "].confine."
	switch sandbox.Mode(c.Mode) {
	case "", sandbox.WorkspaceWrite, sandbox.Unconfined:
	default:
		return fmt.Errorf("%smode: unknown mode %q: use \"workspace-write\" or \"unconfined\"", prefix, c.Mode)
	}
	return sandbox.CheckRoots(prefix, c.ReadRoots, c.WriteRoots, home)
}

// resolveConfine applies the default and the kernel to provider i's
// confine: "workspace-write" where Landlock is, else "unconfined"; an
// explicit "workspace-write" without Landlock is an error, never a silent
// unconfined agent. It logs an unconfined agent as a warning.
func resolveConfine(c *ConfineConfig, i int, abi int, reason string, log *slog.Logger) (sandbox.Agent, error) {
	var cc ConfineConfig
	if c != nil {
		cc = *c
	}
	a := sandbox.Agent{Mode: sandbox.Mode(cc.Mode), ReadRoots: cc.ReadRoots, WriteRoots: cc.WriteRoots}
	switch {
	case a.Mode == "" && abi >= 1:
		a.Mode = sandbox.WorkspaceWrite
	case a.Mode == "":
		a.Mode = sandbox.Unconfined
		log.Warn("external agent unconfined: it can read, write and reach everything this server can", "reason", reason)
		return a, nil
	case a.Mode == sandbox.Unconfined:
		log.Warn("external agent unconfined (configured): it can read, write and reach everything this server can")
		return a, nil
	case abi < 1:
		return a, fmt.Errorf("providers[%d].confine: mode %q needs Landlock, which this kernel lacks (%s); set it to \"unconfined\" to let the agent run with your full authority", i, a.Mode, reason)
	}
	log.Info("external agent confined", "mode", a.Mode, "landlock_abi", abi)
	return a, nil
}
