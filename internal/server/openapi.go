package server

import (
	"cmp"
	"encoding"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/client"
)

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) (any, error) {
	return s.OpenAPI(), nil
}

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// OpenAPI is the OpenAPI 3 document of the server's routes, generated from
// the same table the mux is built from; the schemas come from the Go types
// of the bodies (package api, package client, spec.Environment).
func (s *Server) OpenAPI() map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	errSchema := g.schema(reflect.TypeOf(client.ErrorBody{}))
	paths := map[string]map[string]any{}
	for _, rt := range s.routes {
		op := map[string]any{
			"summary":     rt.summary,
			"operationId": operationID(rt),
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			desc := "an id or a unique id prefix"
			if m[1] == "name" {
				desc = "a name"
			}
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true,
				"description": desc, "schema": map[string]any{"type": "string"}})
		}
		for _, p := range rt.query {
			sch := map[string]any{"type": p.typ}
			if p.typ == "boolean" {
				sch = map[string]any{"type": "string", "enum": []string{"0", "1", "true", "false"}}
			}
			if p.repeat {
				sch = map[string]any{"type": "array", "items": sch}
			}
			params = append(params, map[string]any{"name": p.name, "in": "query", "description": p.desc, "schema": sch, "explode": true})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.body != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.body))}}}
		}
		ct := cmp.Or(rt.contentType, "application/json")
		// The media type without its parameters: clients match it against
		// what the server negotiates (Prometheus' text format adds its
		// version, charset and escaping).
		ct, _, _ = strings.Cut(ct, ";")
		var content map[string]any
		switch {
		case rt.resp != nil:
			content = map[string]any{ct: map[string]any{"schema": g.schema(reflect.TypeOf(rt.resp))}}
		case strings.HasPrefix(ct, "text/"):
			content = map[string]any{ct: map[string]any{"schema": map[string]any{"type": "string"}}}
		default:
			content = map[string]any{ct: map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}
		}
		op["responses"] = map[string]any{
			strconv.Itoa(rt.status): map[string]any{"description": http.StatusText(rt.status), "content": content},
			"4XX":                   map[string]any{"$ref": "#/components/responses/Error"},
			"5XX":                   map[string]any{"$ref": "#/components/responses/Error"},
		}
		if paths[rt.path] == nil {
			paths[rt.path] = map[string]any{}
		}
		paths[rt.path][strings.ToLower(rt.method)] = op
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":       "hostfork serve",
			"version":     client.APIVersion,
			"description": "The local HTTP API of hostfork on a unix socket (docs/api.md). Every response carries the header " + client.VersionHeader + ": " + client.APIVersion + ".",
		},
		"servers": []any{map[string]any{"url": "http://localhost", "description": "curl --unix-socket /var/lib/hostfork/api.sock http://localhost/v1/..."}},
		// No credentials travel in requests: the server asks the kernel
		// which uid connected (SO_PEERCRED) and refuses other users
		// (docs/security.md). OpenAPI has no scheme for that, so the one
		// requirement is the empty one.
		"security": []any{map[string]any{}},
		"paths":    paths,
		"components": map[string]any{
			"schemas": g.defs,
			"responses": map[string]any{"Error": map[string]any{"description": "an error: its cause and exit code (docs/api.md, \"Errors\")",
				"content": map[string]any{"application/json": map[string]any{"schema": errSchema}}}},
		},
	}
}

func operationID(rt route) string {
	p := strings.NewReplacer("/v1/", "", "/", "_", "{", "", "}", "", ".", "_").Replace(strings.TrimPrefix(rt.path, "/"))
	return strings.ToLower(rt.method) + "_" + strings.Trim(p, "_")
}

// schemaGen derives JSON Schemas (OpenAPI 3.1, JSON Schema 2020-12) from Go types
// the way encoding/json writes them.
type schemaGen struct {
	defs map[string]any
}

var (
	textMarshaler = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	timeType      = reflect.TypeOf(time.Time{})
	rawType       = reflect.TypeOf(json.RawMessage{})
	durationType  = reflect.TypeOf(time.Duration(0))
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	if t.Kind() == reflect.Pointer {
		// encoding/json writes a nil pointer as null, whatever the type.
		return nullable(g.schema(t.Elem()))
	}
	if vs, ok := enums[t]; ok {
		var enum []any
		for _, v := range vs {
			enum = append(enum, v)
		}
		sch := map[string]any{"type": "string"}
		if why, ok := emptyMeans[t]; ok {
			enum = append(enum, "")
			sch["description"] = `"": ` + why
		}
		sch["enum"] = enum
		return sch
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{"description": "any JSON value"}
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return map[string]any{"type": "string"}
	case t.Implements(jsonMarshaler):
		return map[string]any{"description": "any JSON value"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t == durationType {
			return map[string]any{"type": "integer", "description": "nanoseconds"}
		}
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{"description": "any JSON value"}
	case reflect.Struct:
		name := t.Name()
		if name == "" {
			return g.object(t)
		}
		pkg := t.PkgPath()
		key := pkg[strings.LastIndex(pkg, "/")+1:] + "." + name
		if _, ok := g.defs[key]; !ok {
			g.defs[key] = map[string]any{} // break recursion
			g.defs[key] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + key}
	}
	return map[string]any{}
}

// nullable is s that also admits null, the OpenAPI 3.1 way: "null" in the
// type array, or a $ref beside {"type": "null"} (decision 109).
func nullable(s map[string]any) map[string]any {
	if _, isRef := s["$ref"]; isRef {
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	}
	typ, ok := s["type"].(string)
	if !ok {
		return s // any JSON value, null included
	}
	out := map[string]any{}
	maps.Copy(out, s)
	out["type"] = []any{typ, "null"}
	if enum, ok := s["enum"].([]any); ok {
		out["enum"] = append(append([]any{}, enum...), nil)
	}
	return out
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	g.fields(t, props, &required, true)
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		sort.Strings(required)
		out["required"] = required
	}
	return out
}

// fields adds t's fields as encoding/json writes them. A field is
// required when encoding/json always writes it: no omitempty or omitzero,
// and not promoted from an embedded pointer (always is false below one).
// A slice or map that is always written may be null (a nil one is).
func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string, always bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				g.fields(ft.Elem(), props, required, false)
				continue
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required, always)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		name = cmp.Or(name, f.Name)
		sch := g.schema(f.Type)
		if o := strings.Split(opts, ","); !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero") {
			if k := f.Type.Kind(); k == reflect.Slice && f.Type != rawType || k == reflect.Map {
				sch = nullable(sch)
			}
			if always {
				*required = append(*required, name)
			}
		}
		props[name] = sch
	}
}
