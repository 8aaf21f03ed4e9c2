package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// outputMode says how to read the final answer.
type outputMode struct {
	structured bool // the request asked for JSON: parse the text
	wrapped    bool // the schema was wrapped as {"value": schema}: unwrap
}

// wrapKey is the one property of the object a non-object output schema is
// wrapped in: response_format json_schema wants an object at the root.
const wrapKey = "value"

// schemaName names the output schema in response_format.
const schemaName = "output"

// buildParams maps a request to Chat Completions parameters.
func buildParams(name string, req *svc.ModelRequest, s *settings, openAI bool) (sdk.ChatCompletionNewParams, outputMode, error) {
	p := sdk.ChatCompletionNewParams{Model: name}
	msgs, err := messages(req)
	if err != nil {
		return p, outputMode{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassInvalid, Message: err.Error()}
	}
	p.Messages = msgs
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: toolParameters(t.InputSchema)}
		if t.Description != "" {
			fd.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(fd))
	}

	var out outputMode
	if len(bytes.TrimSpace(req.OutputSchema)) > 0 {
		out.structured = true
		if sch, wrapped, ok := responseSchema(req.OutputSchema); ok {
			out.wrapped = wrapped
			p.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
					Name:   schemaName,
					Strict: param.NewOpt(strictOK(sch)),
					Schema: sch,
				},
			}
		}
	}

	p.Temperature = s.temperature
	p.TopP = s.topP
	p.Seed = s.seed
	if s.maxTokens.Valid() {
		if openAI {
			p.MaxCompletionTokens = s.maxTokens
		} else {
			p.MaxTokens = s.maxTokens
		}
	}
	switch {
	case s.stopString && len(s.stop) == 1:
		p.Stop.OfString = param.NewOpt(s.stop[0])
	case len(s.stop) > 0:
		p.Stop.OfStringArray = s.stop
	}
	extra := s.extra
	if openAI {
		extra = make(map[string]any, len(s.extra))
		for k, v := range s.extra {
			if !anthropicOnlyKeys[k] {
				extra[k] = v
			}
		}
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	return p, out, nil
}

// messages maps the conversation: the instructions become the system
// message, and each message's content, a JSON value, is sent as text (a
// JSON string as its text, any other value as its JSON).
func messages(req *svc.ModelRequest) ([]sdk.ChatCompletionMessageParamUnion, error) {
	out := make([]sdk.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if req.Instructions != "" {
		out = append(out, sdk.SystemMessage(req.Instructions))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case svc.RoleUser:
			out = append(out, sdk.UserMessage(text(m.Content)))
		case svc.RoleAssistant:
			var a sdk.ChatCompletionAssistantMessageParam
			if !isEmpty(m.Content) || len(m.ToolCalls) == 0 {
				a.Content.OfString = param.NewOpt(text(m.Content))
			}
			for _, c := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID: c.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      c.Name,
							Arguments: arguments(c.Arguments),
						},
					},
				})
			}
			out = append(out, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case svc.RoleTool:
			content := text(m.Content)
			if m.IsError {
				// Chat Completions has no error flag on a tool result; say
				// it in the text so the model does not take it for data.
				content = "Error: " + content
			}
			out = append(out, sdk.ToolMessage(content, m.ToolCallID))
		default:
			return nil, fmt.Errorf("message %d: unsupported role %q", i, m.Role)
		}
	}
	return out, nil
}

// isEmpty reports whether content is absent or JSON null.
func isEmpty(content json.RawMessage) bool {
	c := bytes.TrimSpace(content)
	return len(c) == 0 || bytes.Equal(c, []byte("null"))
}

// text is the text of a content value: a JSON string's text, or the JSON
// of any other value; absent content is empty.
func text(content json.RawMessage) string {
	c := bytes.TrimSpace(content)
	if len(c) == 0 {
		return ""
	}
	if c[0] == '"' {
		var s string
		if json.Unmarshal(c, &s) == nil {
			return s
		}
	}
	return string(c)
}

// arguments is a tool call's arguments as the JSON text the API wants.
func arguments(args json.RawMessage) string {
	if isEmpty(args) {
		return "{}"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, args) == nil {
		return buf.String()
	}
	return string(args)
}

// toolParameters is a tool's input schema as the SDK's map. Its values stay
// raw JSON, so numbers and key order inside them are sent exactly as
// given. A missing or non-object schema becomes "any object", which is
// what a function's parameters must be.
func toolParameters(schema json.RawMessage) shared.FunctionParameters {
	var m map[string]json.RawMessage
	if isEmpty(schema) || json.Unmarshal(schema, &m) != nil || m == nil {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}
	}
	out := make(shared.FunctionParameters, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// responseSchema is the schema to send as response_format: the output
// schema itself when its root is an object, else the schema wrapped as the
// one required property "value" of an object (its $defs moved to the new
// root so that "#/$defs/..." references still resolve). ok is false for a
// schema that constrains nothing (true, {}) or that cannot be wrapped
// safely (a reference into the schema's root other than its definitions):
// the answer is then asked for by the instructions alone.
func responseSchema(raw json.RawMessage) (schema json.RawMessage, wrapped, ok bool) {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil, false, false
	}
	if m["type"] == "object" {
		return raw, false, true
	}
	if !refsOnlyDefs(m) {
		return nil, false, false
	}
	root := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{wrapKey: m},
		"required":             []string{wrapKey},
		"additionalProperties": false,
	}
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := m[k]; ok {
			root[k] = d
			delete(m, k)
		}
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil, false, false
	}
	return b, true, true
}

// refsOnlyDefs reports whether every $ref in v points into #/$defs or
// #/definitions.
func refsOnlyDefs(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if k == "$ref" {
				ref, _ := e.(string)
				if !strings.HasPrefix(ref, "#/$defs/") && !strings.HasPrefix(ref, "#/definitions/") {
					return false
				}
				continue
			}
			if !refsOnlyDefs(e) {
				return false
			}
		}
	case []any:
		for _, e := range t {
			if !refsOnlyDefs(e) {
				return false
			}
		}
	}
	return true
}

// strictKeywords are the JSON Schema keywords OpenAI's strict structured
// outputs accept.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true, "$ref": true,
	"$defs": true, "definitions": true, "description": true, "title": true,
	"pattern": true, "format": true, "minimum": true, "maximum": true,
	"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minItems": true, "maxItems": true,
}

// maxStrictDepth is OpenAI's limit on nesting in a strict schema.
const maxStrictDepth = 10

// strictOK reports whether a schema meets strict structured outputs: an
// object root, only supported keywords, and every object closed
// (additionalProperties false) with all its properties required. Strict
// mode guarantees a schema-valid answer, but the API rejects any schema
// outside that subset, so anything else is sent with strict false.
func strictOK(schema json.RawMessage) bool {
	var m map[string]any
	if json.Unmarshal(schema, &m) != nil || m["type"] != "object" {
		return false
	}
	return strictNode(m, 0)
}

func strictNode(v any, depth int) bool {
	m, ok := v.(map[string]any)
	if !ok || depth > maxStrictDepth {
		return false
	}
	for k := range m {
		if !strictKeywords[k] {
			return false
		}
	}
	props, hasProps := m["properties"].(map[string]any)
	if _, present := m["properties"]; present && !hasProps {
		return false
	}
	if hasProps || isType(m["type"], "object") {
		if ap, ok := m["additionalProperties"].(bool); !ok || ap {
			return false
		}
		req := map[string]bool{}
		list, _ := m["required"].([]any)
		for _, r := range list {
			if s, ok := r.(string); ok {
				req[s] = true
			}
		}
		for name, p := range props {
			if !req[name] || !strictNode(p, depth+1) {
				return false
			}
		}
	}
	if items, ok := m["items"]; ok && !strictNode(items, depth+1) {
		return false
	}
	if a, ok := m["anyOf"]; ok {
		list, ok := a.([]any)
		if !ok {
			return false
		}
		for _, e := range list {
			if !strictNode(e, depth+1) {
				return false
			}
		}
	}
	for _, k := range []string{"$defs", "definitions"} {
		if d, ok := m[k]; ok {
			defs, ok := d.(map[string]any)
			if !ok {
				return false
			}
			for _, e := range defs {
				if !strictNode(e, depth+1) {
					return false
				}
			}
		}
	}
	return true
}

// isType reports whether a schema's type keyword is or includes want.
func isType(t any, want string) bool {
	switch v := t.(type) {
	case string:
		return v == want
	case []any:
		for _, e := range v {
			if e == want {
				return true
			}
		}
	}
	return false
}
