// Print the Lambda payload a task state of a state machine definition builds, as Step Functions
// would: JSONPath `.$` fields (through jsonpath-plus) or JSONata `{% %}` strings (through jsonata).
// Usage: node _step_functions_payload.js NODE_MODULES DEFINITION.json STATE '{"input": ..., "context": ...}'
"use strict";
const fs = require("fs");
const path = require("path");

const [modules, definitionPath, stateName, statesJson] = process.argv.slice(2);
const load = (name) => require(path.resolve(modules, name));
const jsonata = load("jsonata");
const { JSONPath } = load("jsonpath-plus");

const definition = JSON.parse(fs.readFileSync(definitionPath, "utf8"));
const state = definition.States[stateName];
const states = JSON.parse(statesJson); // {input, context}
const language = state.QueryLanguage || definition.QueryLanguage || "JSONPath";

function jsonPath(expression) {
  const [root, rest] = expression.startsWith("$$")
    ? [states.context, expression.slice(1)]
    : [states.input, expression];
  const found = JSONPath({ path: rest, json: root, wrap: false });
  if (found === undefined) throw new Error(`${expression} finds nothing`);
  return found;
}

async function evaluate(template) {
  if (Array.isArray(template)) return Promise.all(template.map(evaluate));
  if (template !== null && typeof template === "object") {
    const result = {};
    for (const [key, value] of Object.entries(template)) {
      if (language === "JSONPath" && key.endsWith(".$")) {
        result[key.slice(0, -2)] = jsonPath(value);
      } else {
        result[key] = await evaluate(value);
      }
    }
    return result;
  }
  const match = typeof template === "string" && /^\{%([\s\S]*)%\}$/.exec(template);
  if (language === "JSONata" && match) {
    return jsonata(match[1]).evaluate({}, { states });
  }
  return template;
}

const fields = language === "JSONata" ? state.Arguments : state.Parameters;
evaluate(fields.Payload).then(
  (payload) => process.stdout.write(JSON.stringify(payload)),
  (error) => {
    process.stderr.write(`${error.message}\n`);
    process.exit(1);
  },
);
