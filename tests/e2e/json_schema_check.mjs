// A checker for the JSON-schema subset the e2e tests use (type, enum, const, properties, required,
// additionalProperties, items, min/maxItems, min/maxLength, pattern, minimum/maximum, anyOf).
import assert from 'node:assert/strict';

const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);

export function validate(schema, value, where = '$') {
  if (schema.enum) {
    assert.ok(schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)), `${where}: ${JSON.stringify(value)} not in enum`);
    return;
  }
  if (schema.const !== undefined) assert.deepEqual(value, schema.const, `${where}: not the const`);
  if (schema.anyOf) {
    const ok = schema.anyOf.some((s) => { try { validate(s, value, where); return true; } catch { return false; } });
    assert.ok(ok, `${where}: matches none of anyOf`);
  }
  const types = [].concat(schema.type ?? []);
  if (types.length) {
    const t = typeOf(value);
    assert.ok(types.includes(t) || (t === 'integer' && types.includes('number')), `${where}: type ${t}, want ${types}`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined) assert.ok(value >= schema.minimum, `${where}: ${value} < minimum`);
    if (schema.maximum !== undefined) assert.ok(value <= schema.maximum, `${where}: ${value} > maximum`);
  }
  if (typeof value === 'string') {
    const len = [...value].length;
    if (schema.minLength !== undefined) assert.ok(len >= schema.minLength, `${where}: shorter than minLength`);
    if (schema.maxLength !== undefined) assert.ok(len <= schema.maxLength, `${where}: longer than maxLength`);
    if (schema.pattern) assert.match(value, new RegExp(schema.pattern), where);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined) assert.ok(value.length >= schema.minItems, `${where}: too few items`);
    if (schema.maxItems !== undefined) assert.ok(value.length <= schema.maxItems, `${where}: too many items`);
    value.forEach((v, i) => schema.items && validate(schema.items, v, `${where}[${i}]`));
  }
  if (typeOf(value) === 'object') {
    for (const key of schema.required ?? []) assert.ok(key in value, `${where}: missing ${key}`);
    for (const [key, v] of Object.entries(value)) {
      const sub = schema.properties?.[key];
      if (sub) validate(sub, v, `${where}.${key}`);
      else assert.ok(schema.additionalProperties !== false, `${where}: unexpected property ${key}`);
    }
  }
}
