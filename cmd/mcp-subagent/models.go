package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/anthropic"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
	"github.com/mcp-subagent/mcp-subagent/providers/spawn"
)

// ModelConfig is one model backend in the config's models list. The first
// is the default of spawn and fork; a subagent call chooses another by
// name.
type ModelConfig struct {
	Name string `json:"name"`
	// API is "openai" (chat completions: OpenAI, DeepSeek, Ollama,
	// OpenRouter, vLLM...) or "anthropic" (the Messages API).
	API string `json:"api"`
	// BaseURL: for openai the root with its version path
	// (https://api.openai.com/v1, the default); for anthropic the API root
	// without /v1 (https://api.anthropic.com, the default).
	BaseURL   string     `json:"base_url,omitempty"`
	APIKeyEnv string     `json:"api_key_env,omitempty"` // zero: no key (a local server)
	Model     string     `json:"model"`                 // the id sent to the API
	MaxTokens int64      `json:"max_tokens,omitempty"`  // zero: the server's default
	Effort    llm.Effort `json:"effort,omitempty"`      // zero: the backend's default
	Price     *llm.Price `json:"price,omitempty"`       // set: usage carries cost_usd

	// from names the setting each of BaseURL, APIKeyEnv and Model came
	// from, for the errors of a failed model call; zero: models[i].
	from modelSources
}

// modelSources names where a model's address, key and id were set: a
// config field, an environment variable or a built-in default.
type modelSources struct{ baseURL, key, model string }

const (
	apiOpenAI    = "openai"
	apiAnthropic = "anthropic"

	defaultAnthropicBaseURL = "https://api.anthropic.com"
	defaultAnthropicModel   = "claude-sonnet-4-5"
)

// checkLLMBesideModels refuses an llm block that names a model beside a
// models list: which of the two is the default would be a guess.
func checkLLMBesideModels(c Config) error {
	l := c.LLM
	if len(c.Models) > 0 && (l.BaseURL != "" || l.APIKeyEnv != "" || l.Model != "" || l.MaxTokens != 0) {
		return fmt.Errorf("llm.base_url, llm.api_key_env, llm.model and llm.max_tokens describe one model, and models lists them: move that model into models (the first entry is the default; name it %q to keep its name); llm.max_retries, llm.max_steps, llm.stream_idle_seconds and llm.max_output_bytes still apply to every model", spawn.DefaultModel)
	}
	return nil
}

// checkModels validates the models entries, each error naming the entry
// by its index (which the schema's errors cannot): names non-empty and
// unique, api and effort known, a model id, anthropic base URLs without
// /v1, prices and max_tokens not negative.
func checkModels(models []ModelConfig) error {
	seen := map[string]int{}
	for i, m := range models {
		if m.Name == "" {
			return fmt.Errorf("models[%d].name: give the model a non-empty name (a subagent call chooses it by name)", i)
		}
		if j, dup := seen[m.Name]; dup {
			return fmt.Errorf("models[%d].name: %q is already the name of models[%d]; names must be unique", i, m.Name, j)
		}
		seen[m.Name] = i
		if m.Model == "" {
			return fmt.Errorf("models[%d].model: give the model id the API expects (e.g. gpt-4.1-mini, deepseek-chat, claude-sonnet-4-5)", i)
		}
		switch m.API {
		case apiOpenAI:
		case apiAnthropic:
			if u := strings.TrimRight(m.BaseURL, "/"); strings.HasSuffix(u, "/v1") {
				return fmt.Errorf("models[%d].base_url: an anthropic base_url is the API root without /v1 (such as %s); drop the /v1", i, defaultAnthropicBaseURL)
			}
		default:
			return fmt.Errorf("models[%d].api: %q is not an API; use openai or anthropic", i, m.API)
		}
		if !m.Effort.Valid() {
			return fmt.Errorf("models[%d].effort: %q is not an effort; use low, medium or high", i, m.Effort)
		}
		if m.MaxTokens < 0 {
			return fmt.Errorf("models[%d].max_tokens: must be at least 1 (or absent: the server's default)", i)
		}
		if p := m.Price; p != nil && (p.InputPerMTok < 0 || p.OutputPerMTok < 0) {
			return fmt.Errorf("models[%d].price: input_per_mtok and output_per_mtok are USD per million tokens, not negative", i)
		}
	}
	return nil
}

// resolveModels is the deployment's model list: the config's models, or
// without them one model named "default" from the llm block and the
// environment (see llmModel), or, when ANTHROPIC_API_KEY is the only key
// set and the llm block names no endpoint, a native Anthropic default.
func resolveModels(c Config) []ModelConfig { return resolveModelsEnv(c, os.Getenv) }

// resolveModelsEnv is resolveModels reading the variables with getenv (a
// session's settings).
func resolveModelsEnv(c Config, getenv func(string) string) []ModelConfig {
	if len(c.Models) > 0 {
		out := slices.Clone(c.Models)
		for i := range out {
			out[i].from = modelSources{
				baseURL: fmt.Sprintf("models[%d].base_url", i),
				key:     fmt.Sprintf("models[%d].api_key_env", i),
				model:   fmt.Sprintf("models[%d].model", i),
			}
			if out[i].BaseURL == "" {
				out[i].from.baseURL = fmt.Sprintf("the default, models[%d].base_url being unset", i)
			}
		}
		return out
	}
	l := c.LLM
	anthropic := getenv("ANTHROPIC_API_KEY") != "" && l.BaseURL == "" && l.APIKeyEnv == "" &&
		getenv("OPENAI_API_KEY") == "" && getenv("DEEPSEEK_API_KEY") == "" && getenv("OPENAI_BASE_URL") == ""
	if anthropic {
		m := ModelConfig{Name: spawn.DefaultModel, API: apiAnthropic, BaseURL: getenv("ANTHROPIC_BASE_URL"),
			APIKeyEnv: "ANTHROPIC_API_KEY", Model: l.Model, MaxTokens: l.MaxTokens,
			from: modelSources{baseURL: "ANTHROPIC_BASE_URL", key: "ANTHROPIC_API_KEY", model: "llm.model"}}
		if m.BaseURL == "" {
			m.from.baseURL = "the default, ANTHROPIC_BASE_URL being unset"
		}
		if m.Model == "" {
			m.Model, m.from.model = getenv("MCP_SUBAGENT_MODEL"), "MCP_SUBAGENT_MODEL"
		}
		if m.Model == "" {
			m.Model, m.from.model = defaultAnthropicModel, "the default, MCP_SUBAGENT_MODEL being unset"
		}
		return []ModelConfig{m}
	}
	return []ModelConfig{llmModelEnv(l, getenv)}
}

// buildModels makes a client for each model: openai-go or the Anthropic
// SDK behind llm.Client, wrapped in llm.Priced where a price is set, with
// the llm block's settings that apply to every model (retries, the stream
// idle timeout, the output bound). A model whose key variable is empty is
// built anyway (its children fail with the API's answer) and warned about.
func buildModels(ms []ModelConfig, all LLMConfig, log *slog.Logger) []spawn.Model {
	return buildModelsEnv(ms, all, os.Getenv, nil, log)
}

// buildModelsEnv is buildModels reading the key variables with getenv (a
// session's settings); keyFrom, when set, says where a key variable's
// value was looked up, for the error of a model call without one.
func buildModelsEnv(ms []ModelConfig, all LLMConfig, getenv func(string) string, keyFrom func(name string) string, log *slog.Logger) []spawn.Model {
	out := make([]spawn.Model, 0, len(ms))
	for _, m := range ms {
		cfg := transport.Config{BaseURL: m.BaseURL, Model: m.Model, Logger: log.With("model", m.Name),
			StreamIdleTimeout: orSeconds(all.StreamIdleSeconds, transport.DefaultStreamIdleTimeout),
			MaxOutputBytes:    all.MaxOutputBytes}
		if all.MaxRetries != nil {
			cfg.MaxRetries = *all.MaxRetries
		}
		if m.APIKeyEnv != "" {
			cfg.APIKey = getenv(m.APIKeyEnv)
		}
		if cfg.APIKey == "" && m.APIKeyEnv != "" {
			log.Warn("no API key for a model: its key variable is empty; in-process children on it will fail until it is set (without a config: OPENAI_API_KEY, DEEPSEEK_API_KEY or ANTHROPIC_API_KEY)",
				"model", m.Name, "api_key_env", m.APIKeyEnv, "base_url", m.BaseURL)
		}
		var client llm.Client
		if m.API == apiAnthropic {
			if cfg.BaseURL == "" {
				cfg.BaseURL = defaultAnthropicBaseURL
			}
			client = anthropic.New(cfg)
		} else {
			client = openai.New(cfg)
		}
		if m.Price != nil {
			client = llm.Priced{Client: client, Price: *m.Price}
		}
		src := sourced{Client: client, m: m, base: cfg.BaseURL, noKey: cfg.APIKey == "" && m.APIKeyEnv != ""}
		if keyFrom != nil && m.APIKeyEnv != "" {
			src.keyFrom = keyFrom(m.APIKeyEnv)
		}
		client = src
		out = append(out, spawn.Model{Name: m.Name, Client: client, ID: m.Model, MaxTokens: m.MaxTokens, Effort: m.Effort})
	}
	return out
}

// sourced adds to a failed model call's error where its address, key and
// model id came from, so "connection refused", a 401 or a 404 names the
// setting to fix (the key by its variable, never its value).
type sourced struct {
	llm.Client
	m     ModelConfig
	base  string // the address called (the API's default when m.BaseURL is empty)
	noKey bool   // the key variable is empty
	// keyFrom says where the key variable's value was looked up (a
	// session's settings); empty: the server's environment.
	keyFrom string
}

func (s sourced) Complete(ctx context.Context, req llm.Request, onDelta func(string)) (llm.Response, error) {
	resp, err := s.Client.Complete(ctx, req, onDelta)
	if err == nil || ctx.Err() != nil {
		return resp, err // a cancelled call is not the settings' fault
	}
	return resp, fmt.Errorf("%w (%s)", err, s.where())
}

// where words the model's settings: "model "m" (from MCP_SUBAGENT_MODEL)
// at http://... (from OPENAI_BASE_URL), key from OPENAI_API_KEY".
func (s sourced) where() string {
	from := s.m.from
	if from == (modelSources{}) {
		from = modelSources{baseURL: "base_url", key: "api_key_env", model: "model"}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "model %q (from %s) at %s (from %s), ", s.m.Model, from.model, s.base, from.baseURL)
	switch {
	case s.m.APIKeyEnv == "":
		b.WriteString("no key configured")
	case s.noKey && s.keyFrom != "":
		fmt.Fprintf(&b, "no key is set: %s (%s; named by %s)", s.m.APIKeyEnv, s.keyFrom, from.key)
	case s.noKey:
		fmt.Fprintf(&b, "no key is set: %s is empty (named by %s)", s.m.APIKeyEnv, from.key)
	case from.key == s.m.APIKeyEnv:
		fmt.Fprintf(&b, "key from %s", s.m.APIKeyEnv)
	default:
		fmt.Fprintf(&b, "key from %s (named by %s)", s.m.APIKeyEnv, from.key)
	}
	return b.String()
}
