// Package llm is the chat model contract of mcp-subagent and its two
// backends: OpenAI-compatible chat completions APIs (OpenAI, DeepSeek,
// Ollama, vLLM, LM Studio, OpenRouter) and the native Anthropic Messages API.
//
// The contract is [Client]: one call takes a [Request] (messages, tools,
// max tokens, effort) and returns the model's whole answer as a [Response]
// (one assistant message, a [FinishReason], token [Usage]), streaming
// assistant text to a callback as it arrives. [NewOpenAI] builds the first
// backend over github.com/openai/openai-go/v3, [NewAnthropic] the second
// over github.com/anthropics/anthropic-sdk-go/v2; both take the same
// [Config]. [Priced] wraps either to cost its usage. The package is a leaf:
// it imports nothing of ours, and nothing of the SDKs leaks through its API.
//
// # What both backends guarantee
//
//   - They always stream, and assemble content, tool calls and usage
//     themselves.
//   - A stream that breaks (read error, error event, no answer at all, or an
//     answer that never reached its end) is a transport failure, never half
//     an answer reported as complete.
//   - A stream that sends no event for Config.StreamIdleTimeout (default
//     5 minutes; from the request to the first event, or between two) is
//     cut, and counts as a broken stream. An Anthropic answer is whole at
//     message_stop: a body held open after it is given a second to end.
//   - An answer is bounded as it is assembled: past Config.MaxOutputBytes
//     (default 1 MiB; text, refusal and tool calls together, cut at a
//     character) the rest is not read, and the Response ends
//     [FinishLength] with OutputLimit set; its output tokens are at least
//     a token per 4 bytes read, as a cut stream reports no final count.
//   - HTTP 429, 5xx (Anthropic's 529 "overloaded" among them), transport
//     failures and broken streams are retried, Config.MaxRetries times, with
//     exponential backoff and jitter (honouring Retry-After up to a minute);
//     other statuses fail at once. The SDKs' own retries are off.
//   - Errors other than cancellation are [*Error], whose message names the
//     status and the server's message and never carries the API key or URL.
//     Cancellation returns an error wrapping ctx.Err().
//   - Without Config.HTTPClient, calls go through [DefaultTransport]:
//     up to 100 idle connections per host are kept for the next calls
//     (parallel children's calls end together; Go keeps 2), and an HTTPS
//     host gets at most 64 connections dialled at once, so calls starting
//     together share an HTTP/2 connection instead of each paying a TLS
//     handshake. An HTTPS server of HTTP/1.1 only serves at most that many
//     calls at once per client. After [DONE] the rest of the body is read
//     (up to 64 KiB, for at most a second) so its connection is reused.
//   - Only the [Config] is used: the SDKs' environment defaults
//     (OPENAI_BASE_URL, OPENAI_ORG_ID, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
//     ANTHROPIC_CUSTOM_HEADERS, credential profiles, ...) are not read; the
//     caller decides.
//   - Request.Effort must be empty or low, medium or high (anything else
//     fails before a request is sent); empty sends nothing, so models
//     without the knob see no new field.
//
// # OpenAI-compatible chat completions
//
//   - The SDK carries the request (URL, headers, auth) and splits the event
//     stream; the body and the chunks are this package's own small structs
//     under encoding/json, tested to be the SDK's bytes as JSON
//     (TestBodyIsTheSDKs, FuzzChunkIsTheSDKs): its reflective encoders cost
//     a third of a delegation's CPU. A chunk field of the wrong type is
//     read as zero, the rest of the chunk still counts.
//   - stream_options.include_usage is on; refusals and tool calls (merged by
//     index; a call missing its id gets "call_<i>") are assembled.
//   - The finish reason is normalised: a refusal wins over anything the wire
//     said; tool calls with a "stop" or empty/unknown wire reason report
//     [FinishToolCalls] (some servers, Ollama among them, say "stop" after
//     calling tools, and dropping the calls would leave the transcript with
//     unanswered calls). A stream with no finish_reason and no [DONE] is
//     broken.
//   - Request.MaxTokens goes out as max_completion_tokens to api.openai.com
//     (whose reasoning models reject max_tokens) and as max_tokens elsewhere
//     (which most compatible servers understand).
//   - Request.Effort goes out as reasoning_effort, the same three words.
//     Servers and models without reasoning may reject it.
//
// # Anthropic Messages
//
//   - Config.BaseURL is the API root without /v1 ([DefaultAnthropicBaseURL]),
//     as the SDK takes it; the key goes out as x-api-key.
//   - RoleSystem messages, wherever they are, become the system parameter.
//     Consecutive messages of one side merge into one message, so the tool
//     results of a round travel as tool_result blocks of the one user message
//     after the tool_use blocks, as the API requires. Tool call arguments
//     that are not a JSON object go back as {}. A refusal's text is the
//     API's, not the model's, and is not sent back; messages left with
//     nothing to send are left out.
//   - Events message_start … message_stop are read: text deltas go to
//     onDelta (text blocks split by a tool call are joined by a blank line),
//     tool_use blocks with their accumulated input_json_delta become
//     ToolCalls (no input: "{}"), thinking blocks are not part of the answer.
//     A stream without message_stop is broken; an `error` event is retried
//     unless its type is one another attempt cannot fix
//     (invalid_request_error, authentication_error, permission_error,
//     not_found_error, request_too_large, billing_error).
//   - Stop reasons: end_turn and stop_sequence are [FinishStop]; tool_use is
//     [FinishToolCalls]; max_tokens and model_context_window_exceeded are
//     [FinishLength]; refusal is [FinishRefusal] with Message.Refusal set to
//     the API's stop_details explanation (or a sentence naming the category);
//     pause_turn (server tools only, which are never offered) and unknown
//     reasons are [FinishStop], or [FinishToolCalls] when the answer calls
//     tools.
//   - max_tokens is required by the API: Request.MaxTokens, or
//     [DefaultAnthropicMaxTokens] (16384) when zero.
//   - Usage.InputTokens is everything the API read: input_tokens plus
//     cache_creation_input_tokens plus cache_read_input_tokens; OutputTokens
//     is output_tokens. A [Priced] cost therefore charges cached tokens at the
//     full input price: an upper bound.
//   - Prompt caching: cache_control {type: ephemeral} marks the last system
//     block (or, with no system prompt, the last tool), caching the fixed
//     prefix, and the last content block of the newest message, caching the
//     whole history; the next call of the loop, a few blocks longer, reads
//     that prefix back from the cache. Two of the API's four breakpoints are
//     used. Prompts shorter than the model's minimum are simply not cached.
//   - Request.Effort goes out as output_config.effort, the API's own effort
//     control (same three words), rather than an extended-thinking budget:
//     thinking blocks must be sent back, signed, on tool-use turns, and
//     [Message] has no place for them. Models that do not support effort
//     answer 400 invalid_request_error, which is not retried; leave effort
//     empty for them.
//
// # Caveats
//
// onDelta receives the text of every attempt: after a retry, the new
// attempt's text starts over. Treat deltas as progress; the Response is the
// answer. Only the first choice (index 0) of a chat completion is read.
package llm
