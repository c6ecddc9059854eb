package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/mcp-subagent/mcp-subagent/edge"
	"github.com/mcp-subagent/mcp-subagent/manager/budget"
	"github.com/mcp-subagent/mcp-subagent/schemas"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Config is the --config file. Its schema is schemas/config.json; zero
// values mean the defaults documented there.
type Config struct {
	MaxDepth        int      `json:"max_depth,omitempty"`
	Persona         string   `json:"persona,omitempty"`
	Roots           []string `json:"roots,omitempty"`
	DefaultProvider string   `json:"default_provider,omitempty"`
	// Shell is run_shell's mode and sandbox (shell.go); nil: the default.
	Shell   *ShellConfig `json:"shell,omitempty"`
	DataDir string       `json:"data_dir,omitempty"`
	// Store is a PostgreSQL URL to keep the session store in (store.go);
	// empty: the bbolt file in the data directory.
	Store string `json:"store,omitempty"`
	// Cluster tunes several instances sharing the store.
	Cluster     ClusterConfig `json:"cluster"`
	WaitSeconds float64       `json:"wait_seconds,omitempty"`
	// MaxMessageBytes bounds one MCP message a client sends over stdio (a
	// line, in process or relayed); zero: 8 MiB. HTTP bodies have
	// http.max_body_bytes.
	MaxMessageBytes int `json:"max_message_bytes,omitempty"`
	// ClientWaitSeconds bounds every wait per client (by clientInfo.name);
	// it is merged over defaultClientWait.
	ClientWaitSeconds map[string]float64 `json:"client_wait_seconds,omitempty"`
	Daemon            DaemonConfig       `json:"daemon"`
	LLM               LLMConfig          `json:"llm"`
	Spawn             SpawnConfig        `json:"spawn"`
	// Models are the model backends of in-process children, the default
	// first (models.go); empty: the llm block as one model named default.
	Models []ModelConfig `json:"models,omitempty"`
	// Providers are the external providers; nil (absent): codex and
	// claude-code when on PATH; [] : none.
	Providers []ProviderConfig `json:"providers"`
	HTTP      HTTPConfig       `json:"http"`
	Limits    LimitsConfig     `json:"limits"`
	// Retention prunes settled children automatically (admin.go); nil:
	// never.
	Retention *RetentionConfig `json:"retention,omitempty"`
}

// ClusterConfig tunes several instances sharing one store (DESIGN §10).
type ClusterConfig struct {
	// LeaseSeconds is an instance's lease on its resident children
	// (manager.Options.LeaseTTL); zero: manager.DefaultLeaseTTL.
	LeaseSeconds float64 `json:"lease_seconds,omitempty"`
}

// leaseTTL is the manager's LeaseTTL; zero: its default.
func (c ClusterConfig) leaseTTL() time.Duration {
	return time.Duration(c.LeaseSeconds * float64(time.Second))
}

// LimitsConfig bounds tool arguments (edge.Limits) and the turns in
// flight (manager.Options); zero: the defaults documented in
// schemas/config.json.
type LimitsConfig struct {
	PromptBytes       int `json:"prompt_bytes,omitempty"`
	MessageBytes      int `json:"message_bytes,omitempty"`
	PersonaBytes      int `json:"persona_bytes,omitempty"`
	OutputSchemaBytes int `json:"output_schema_bytes,omitempty"`
	AgentIDBytes      int `json:"agent_id_bytes,omitempty"`
	LabelBytes        int `json:"label_bytes,omitempty"`
	CwdBytes          int `json:"cwd_bytes,omitempty"`
	ToolFilterNames   int `json:"tool_filter_names,omitempty"`
	// Budget is children's default budget and its caps (budget.Limits).
	Budget BudgetConfig `json:"budget"`
	// Admission (manager.Options.MaxRunningChildren, MaxRunningTotal):
	// turns in flight per principal (zero: 20) and across principals
	// (zero: no cap beyond each principal's).
	MaxRunningChildren int `json:"max_running_children,omitempty"`
	MaxRunningTotal    int `json:"max_running_total,omitempty"`
}

func (l LimitsConfig) tools() edge.Limits {
	return edge.Limits{PromptBytes: l.PromptBytes, MessageBytes: l.MessageBytes, PersonaBytes: l.PersonaBytes,
		OutputSchemaBytes: l.OutputSchemaBytes, AgentIDBytes: l.AgentIDBytes, LabelBytes: l.LabelBytes,
		CwdBytes: l.CwdBytes, ToolFilterNames: l.ToolFilterNames}
}

// BudgetConfig is limits.budget: the budget of a call that gives none, and
// the caps of every field a call asks; zero: none.
type BudgetConfig struct {
	Default seam.Budget `json:"default"`
	Max     seam.Budget `json:"max"`
}

func (b BudgetConfig) limits() budget.Limits {
	return budget.Limits{Default: b.Default, Max: b.Max}
}

// LLMConfig is the chat API in-process children use when models is
// empty; MaxRetries, MaxSteps, StreamIdleSeconds and MaxOutputBytes apply
// to every model either way.
type LLMConfig struct {
	BaseURL    string `json:"base_url,omitempty"`
	APIKeyEnv  string `json:"api_key_env,omitempty"`
	Model      string `json:"model,omitempty"`
	MaxRetries *int   `json:"max_retries,omitempty"`
	MaxTokens  int64  `json:"max_tokens,omitempty"`
	MaxSteps   int    `json:"max_steps,omitempty"`
	// StreamIdleSeconds cuts a model stream with no event for this long
	// (a retried broken stream); zero: transport.DefaultStreamIdleTimeout.
	StreamIdleSeconds float64 `json:"stream_idle_seconds,omitempty"`
	// MaxOutputBytes bounds one model answer (text and tool calls); zero:
	// transport.DefaultMaxOutputBytes.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
}

// SpawnConfig is the in-process providers' (spawn and fork) policy for
// asking the person.
type SpawnConfig struct {
	// Permission "ask" gives their children the ask_user tool; "deny"
	// (zero): no such tool.
	Permission string `json:"permission,omitempty"`
	// QuestionTimeoutSeconds bounds one question under "ask"; zero: 600.
	QuestionTimeoutSeconds float64 `json:"question_timeout_seconds,omitempty"`
}

func (s SpawnConfig) check() error {
	if s.QuestionTimeoutSeconds > 0 && s.Permission != "ask" {
		return fmt.Errorf("spawn.question_timeout_seconds is set but spawn.permission is %q: it applies only with permission \"ask\"", cmp.Or(s.Permission, "deny"))
	}
	return nil
}

// DaemonConfig tunes the per-data-directory daemon.
type DaemonConfig struct {
	// IdleSeconds: exit after this long with no session and no live child;
	// zero: 600. Negative: never.
	IdleSeconds float64 `json:"idle_seconds,omitempty"`
}

// HTTPConfig guards the streamable HTTP transport (serve --http, and the
// callback listener external children call back on).
type HTTPConfig struct {
	Tokens         []TokenConfig `json:"tokens,omitempty"`
	AllowedOrigins []string      `json:"allowed_origins,omitempty"`
	// MaxBodyBytes bounds a request body (larger: 413); zero: 8 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// ReadTimeoutSeconds bounds the time to send one request, headers and
	// body (a trickled one is cut); zero: 30.
	ReadTimeoutSeconds float64 `json:"read_timeout_seconds,omitempty"`
	// IdleTimeoutSeconds closes a keep-alive connection idle this long;
	// zero: 120.
	IdleTimeoutSeconds float64 `json:"idle_timeout_seconds,omitempty"`
	// SessionIdleSeconds forgets a session with no request this long;
	// zero: 1800.
	SessionIdleSeconds float64 `json:"session_idle_seconds,omitempty"`
}

const (
	defaultMaxBody     = 8 << 20
	defaultReadTimeout = 30 * time.Second
	defaultIdleTimeout = 2 * time.Minute
	defaultSessionIdle = 30 * time.Minute
)

func (hc HTTPConfig) maxBody() int64 {
	if hc.MaxBodyBytes > 0 {
		return hc.MaxBodyBytes
	}
	return defaultMaxBody
}

func orSeconds(v float64, def time.Duration) time.Duration {
	if v > 0 {
		return time.Duration(v * float64(time.Second))
	}
	return def
}

func (hc HTTPConfig) readTimeout() time.Duration {
	return orSeconds(hc.ReadTimeoutSeconds, defaultReadTimeout)
}

func (hc HTTPConfig) idleTimeout() time.Duration {
	return orSeconds(hc.IdleTimeoutSeconds, defaultIdleTimeout)
}

func (hc HTTPConfig) sessionIdle() time.Duration {
	return orSeconds(hc.SessionIdleSeconds, defaultSessionIdle)
}

// TokenConfig is one bearer token and the principal it authenticates. The
// token is given inline or, better, through the named environment variable.
type TokenConfig struct {
	Principal string `json:"principal"`
	Token     string `json:"token,omitempty"`
	TokenEnv  string `json:"token_env,omitempty"`
}

// loadConfig reads and validates the config file; an empty path gives the
// zero Config.
func loadConfig(path string) (Config, error) { return loadConfigEnv(path, os.Getenv) }

// loadConfigEnv is loadConfig reading http.tokens' token_env with getenv
// (a session's settings).
func loadConfigEnv(path string, getenv func(string) string) (Config, error) {
	var c Config
	if path == "" {
		return c, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	// The models entries first: their errors name the entry's index.
	var pre struct {
		Models []ModelConfig `json:"models"`
	}
	if json.Unmarshal(raw, &pre) == nil {
		if err := checkModels(pre.Models); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	v, err := schemas.Compile("config", schemas.Config)
	if err != nil {
		return c, err
	}
	if err := v.Decode(raw, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkLLMBesideModels(c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	for i := range c.Providers {
		if err := c.Providers[i].normalize(i); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	home, _ := os.UserHomeDir()
	if err := c.Shell.check(home); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	for i, pc := range c.Providers {
		if err := pc.Confine.check(i, home); err != nil {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := c.Spawn.check(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if err := c.Retention.check(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	for i, t := range c.HTTP.Tokens {
		if (t.Token == "") == (t.TokenEnv == "") {
			return c, fmt.Errorf("config %s: http.tokens[%d] needs exactly one of token or token_env", path, i)
		}
		if t.TokenEnv != "" {
			v := getenv(t.TokenEnv)
			if len(v) < 16 {
				return c, fmt.Errorf("config %s: http.tokens[%d].token_env: environment variable %s must hold a token of at least 16 characters", path, i, t.TokenEnv)
			}
			c.HTTP.Tokens[i].Token = v
		}
	}
	return c, nil
}
