package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-subagent/mcp-subagent/internal/fakeanthropic"
	"github.com/mcp-subagent/mcp-subagent/internal/fakeopenai"
	"github.com/mcp-subagent/mcp-subagent/llm"
	"github.com/mcp-subagent/mcp-subagent/llm/openai"
	"github.com/mcp-subagent/mcp-subagent/llm/transport"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A bad models entry is a config error naming the entry's field and what
// to do.
func TestBadModelsEntriesAreConfigErrorsNamingTheField(t *testing.T) {
	ok := `{"name":"a","api":"openai","model":"m"}`
	for _, c := range []struct{ name, models, extra, want string }{
		{"unknown api", ok + `,{"name":"b","api":"gemini","model":"m"}`, "", `models[1].api: "gemini" is not an API; use openai or anthropic`},
		{"no model", ok + `,{"name":"b","api":"openai"}`, "", `models[1].model: give the model id`},
		{"empty name", `{"name":"","api":"openai","model":"m"}`, "", `models[0].name`},
		{"duplicate name", ok + `,` + ok, "", `models[1].name: "a" is already the name of models[0]`},
		{"anthropic /v1", ok + `,{"name":"c","api":"anthropic","base_url":"https://api.anthropic.com/v1","model":"m"}`, "", `models[1].base_url: an anthropic base_url is the API root without /v1`},
		{"bad effort", ok + `,{"name":"b","api":"openai","model":"m","effort":"max"}`, "", `models[1].effort: "max" is not an effort`},
		{"negative price", `{"name":"a","api":"openai","model":"m","price":{"input_per_mtok":-1,"output_per_mtok":1}}`, "", `models[0].price: input_per_mtok and output_per_mtok`},
		{"llm beside models", ok, `,"llm":{"model":"x"}`, `llm.base_url, llm.api_key_env, llm.model and llm.max_tokens describe one model, and models lists them`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadConfig(writeConfig(t, `{"models":[`+c.models+`]`+c.extra+`}`))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
		})
	}
	// llm's loop-wide settings stay valid beside models.
	if _, err := loadConfig(writeConfig(t, `{"models":[`+ok+`],"llm":{"max_steps":5,"max_retries":1,"stream_idle_seconds":0.5,"max_output_bytes":4096}}`)); err != nil {
		t.Errorf("models with llm.max_steps, max_retries, stream_idle_seconds and max_output_bytes: %v", err)
	}
	for _, bad := range []string{`{"stream_idle_seconds":-1}`, `{"max_output_bytes":-1}`} {
		if _, err := loadConfig(writeConfig(t, `{"llm":`+bad+`}`)); err == nil {
			t.Errorf("llm %s was accepted", bad)
		}
	}
}

// llm.stream_idle_seconds and llm.max_output_bytes reach every model's
// client, OpenAI and Anthropic: a stalled stream is cut after the
// configured quiet time, and an answer is cut at the configured size.
func TestStreamBoundsReachEveryModel(t *testing.T) {
	oa := fakeopenai.New(func(n int, _ fakeopenai.Request) fakeopenai.Reply {
		if n == 0 {
			return fakeopenai.Reply{Text: "stalls", StallAfter: 1}
		}
		return fakeopenai.Reply{Text: strings.Repeat("x", 1000)}
	})
	defer oa.Close()
	an := fakeanthropic.New(func(r fakeanthropic.Request) fakeanthropic.Reply {
		if r.Seq == 0 {
			return fakeanthropic.Reply{Text: "stalls", StallAfter: 1}
		}
		return fakeanthropic.Reply{Text: strings.Repeat("x", 1000)}
	})
	defer an.Close()
	noRetries := -1
	models := buildModels([]ModelConfig{
		{Name: "o", API: apiOpenAI, BaseURL: oa.URL(), Model: "m"},
		{Name: "a", API: apiAnthropic, BaseURL: an.URL(), Model: "m"},
	}, LLMConfig{MaxRetries: &noRetries, StreamIdleSeconds: 0.3, MaxOutputBytes: 100}, slog.New(slog.DiscardHandler))
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "hi"}}}
	for _, m := range models {
		done := make(chan error, 1)
		go func() {
			_, err := m.Client.Complete(context.Background(), req, nil)
			done <- err
		}()
		select {
		case err := <-done:
			var e *transport.Error
			if !errors.As(err, &e) || !strings.Contains(e.Message, "no event from the server for 300ms") {
				t.Errorf("model %s: err = %v, want the stall cut after 300ms", m.Name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("model %s: the stalled stream was not cut in 30s", m.Name)
		}
		resp, err := m.Client.Complete(context.Background(), req, nil)
		if err != nil || resp.OutputLimit != 100 || len(resp.Message.Content) != 100 {
			t.Errorf("model %s: %d bytes, OutputLimit %d, err %v; want the answer cut at 100", m.Name, len(resp.Message.Content), resp.OutputLimit, err)
		}
	}
}

// Without models, the llm block is one model named default, resolved as
// before; ANTHROPIC_API_KEY alone selects a native Anthropic default; any
// OpenAI-side setting keeps the OpenAI-compatible one.
func TestZeroConfigModels(t *testing.T) {
	for _, k := range []string{"OPENAI_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "MCP_SUBAGENT_MODEL"} {
		t.Setenv(k, "")
	}
	one := func(c Config) ModelConfig {
		t.Helper()
		ms := resolveModels(c)
		if len(ms) != 1 || ms[0].Name != "default" {
			t.Fatalf("models = %+v, want one named default", ms)
		}
		return ms[0]
	}
	if m := one(Config{}); m.API != apiOpenAI || m.BaseURL != openai.DefaultBaseURL || m.Model != "gpt-4.1-mini" || m.APIKeyEnv != "OPENAI_API_KEY" {
		t.Errorf("no environment: %+v", m)
	}
	t.Setenv("DEEPSEEK_API_KEY", "k")
	if m := one(Config{}); m.BaseURL != "https://api.deepseek.com/v1" || m.Model != "deepseek-chat" || m.APIKeyEnv != "DEEPSEEK_API_KEY" {
		t.Errorf("DEEPSEEK_API_KEY: %+v", m)
	}
	t.Setenv("ANTHROPIC_API_KEY", "k")
	if m := one(Config{}); m.API != apiOpenAI {
		t.Errorf("DEEPSEEK_API_KEY and ANTHROPIC_API_KEY: %+v, want DeepSeek's kept", m)
	}
	t.Setenv("DEEPSEEK_API_KEY", "")
	if m := one(Config{}); m.API != apiAnthropic || m.APIKeyEnv != "ANTHROPIC_API_KEY" || m.Model != defaultAnthropicModel || m.BaseURL != "" {
		t.Errorf("ANTHROPIC_API_KEY alone: %+v", m)
	}
	t.Setenv("MCP_SUBAGENT_MODEL", "claude-opus-4-1")
	if m := one(Config{}); m.API != apiAnthropic || m.Model != "claude-opus-4-1" {
		t.Errorf("ANTHROPIC_API_KEY and MCP_SUBAGENT_MODEL: %+v", m)
	}
	if m := one(Config{LLM: LLMConfig{BaseURL: "http://localhost:11434/v1"}}); m.API != apiOpenAI || m.BaseURL != "http://localhost:11434/v1" {
		t.Errorf("an llm base_url with ANTHROPIC_API_KEY: %+v, want the llm block", m)
	}
	t.Setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
	if m := one(Config{}); m.API != apiOpenAI {
		t.Errorf("OPENAI_BASE_URL with ANTHROPIC_API_KEY: %+v, want OpenAI-compatible", m)
	}
	// A models list is taken as it is.
	ms := resolveModels(Config{Models: []ModelConfig{{Name: "x", API: apiOpenAI, Model: "m"}, {Name: "y", API: apiAnthropic, Model: "n"}}})
	if len(ms) != 2 || ms[0].Name != "x" || ms[1].Name != "y" {
		t.Errorf("models = %+v", ms)
	}
}
