package main

// OpenAPI 3.0.3 clarified `nullable` (the spec's Schema Object, from proposal 003 "Clarify Semantics of
// nullable"): it only modifies an explicit `type`, and a schema without `type` allows any value,
// null included (`{}` is "anything", as in JSON Schema). kin-openapi 0.110 (Debian bookworm's) still
// refuses null unless `nullable: true`, also where no type is given, so a free-form value (a change
// event's `fields`, an idempotent operation's stored `response`) holding a null would be reported as
// a violation the document does not contain. The document cannot say `nullable: true` there instead:
// OpenAPI 3.0 gives `nullable` no meaning without `type`, and linters (Redocly's nullable-type-sibling)
// refuse it. So the loaded document is read the 3.0.3 way before validating: an untyped schema with
// no other constraint that could refuse null (enum, not, allOf, anyOf, oneOf) is marked nullable.
// Typed schemas are untouched: a null where the document says `type: string` is still a violation.

import "github.com/getkin/kin-openapi/openapi3"

// allowNullWhereUntyped applies the 3.0.3 reading to every schema of the document; it returns how many it marked.
func allowNullWhereUntyped(doc *openapi3.T) int {
	seen := map[*openapi3.Schema]bool{}
	marked := 0
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type == "" && !s.Nullable && len(s.Enum) == 0 && s.Not == nil && len(s.AllOf) == 0 && len(s.AnyOf) == 0 && len(s.OneOf) == 0 {
			s.Nullable = true
			marked++
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties)
		walk(s.Not)
		for _, list := range [][]*openapi3.SchemaRef{s.AllOf, s.AnyOf, s.OneOf} {
			for _, x := range list {
				walk(x)
			}
		}
	}
	for _, s := range doc.Components.Schemas {
		walk(s)
	}
	content := func(c openapi3.Content) {
		for _, mt := range c {
			if mt != nil {
				walk(mt.Schema)
			}
		}
	}
	for _, item := range doc.Paths {
		for _, op := range item.Operations() {
			for _, p := range op.Parameters {
				if p.Value != nil {
					walk(p.Value.Schema)
				}
			}
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				content(op.RequestBody.Value.Content)
			}
			for _, r := range op.Responses {
				if r.Value != nil {
					content(r.Value.Content)
					for _, h := range r.Value.Headers {
						if h.Value != nil {
							walk(h.Value.Schema)
						}
					}
				}
			}
		}
	}
	return marked
}
