package deploy

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chargeonce/chargeonce/internal/testkit"
)

// keyLike matches a literal that is a provider's key or signing secret:
// Stripe's secret, restricted and webhook keys.
var keyLike = regexp.MustCompile(`\b(sk|rk|whsec)_[A-Za-z0-9_]{4,}`)

// TestNoSecretInAFunctionsEnvironment is the guard of issue 35: anyone
// allowed lambda:GetFunctionConfiguration reads a function's environment,
// so it may hold a secret's name, never its value.
func TestNoSecretInAFunctionsEnvironment(t *testing.T) {
	t.Parallel()
	tmpl, err := parseTemplate(readTemplate(t))
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{tmpl: tmpl}
	c.secretValues()
	c.secretGrants(currentCode().secretNames)
	samconfig, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "samconfig.toml"))
	if err != nil {
		t.Fatal(err)
	}
	c.samconfig(string(samconfig))
	for _, p := range c.problems {
		t.Error(p)
	}
}

// secretValues checks every function's environment, the Globals' too, for
// what puts a secret's value there: a dynamic reference to Secrets Manager
// or to a SecureString parameter (CloudFormation resolves it at deploy
// time into the value), a NoEcho parameter, or a literal key.
func (c *checker) secretValues() {
	noEcho := map[string]bool{}
	for name, p := range asMap(c.tmpl["Parameters"]) {
		if fmt.Sprint(asMap(p)["NoEcho"]) == "true" {
			noEcho[name] = true
		}
	}
	envs := map[string]map[string]any{"Globals": asMap(asMap(asMap(asMap(c.tmpl["Globals"])["Function"])["Environment"])["Variables"])}
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] == "AWS::Serverless::Function" {
			envs[id] = asMap(asMap(c.props(id)["Environment"])["Variables"])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(envs)) {
		for _, name := range slices.Sorted(maps.Keys(envs[id])) {
			walk(envs[id][name], func(v any) {
				switch v := v.(type) {
				case string:
					switch {
					case strings.Contains(v, "resolve:secretsmanager"), strings.Contains(v, "resolve:ssm-secure"):
						c.fail("%s %s holds a dynamic reference, resolved into the secret's value at deploy time: %s", id, name, v)
					case keyLike.MatchString(v):
						c.fail("%s %s holds a literal key", id, name)
					}
					for _, p := range subRefs(v) {
						if noEcho[p] {
							c.fail("%s %s takes the NoEcho parameter %s, a secret's value", id, name, p)
						}
					}
				case map[string]any:
					if ref, ok := v["Ref"].(string); ok && noEcho[ref] {
						c.fail("%s %s takes the NoEcho parameter %s, a secret's value", id, name, ref)
					}
				}
			})
		}
	}
}

// samconfig checks that samconfig.toml passes no secret: no literal key,
// and no value for a NoEcho parameter.
func (c *checker) samconfig(src string) {
	if keyLike.MatchString(src) {
		c.fail("samconfig.toml holds a literal key")
	}
	for name, p := range asMap(c.tmpl["Parameters"]) {
		if fmt.Sprint(asMap(p)["NoEcho"]) == "true" && strings.Contains(src, name+"=") {
			c.fail("samconfig.toml sets the NoEcho parameter %s", name)
		}
	}
}

// walk calls fn on v and on everything v holds.
func walk(v any, fn func(any)) {
	fn(v)
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			walk(v[k], fn)
		}
	case []any:
		for _, e := range v {
			walk(e, fn)
		}
	}
}

// subRefs are the names a Fn::Sub string refers to as ${Name}.
func subRefs(s string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z0-9_:.]+)\}`).FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	return names
}

// secretGrants checks that each function may read exactly the secrets its
// environment names (the variables nameVars, each a Ref to a parameter
// holding a secret's name), with secretsmanager:GetSecretValue alone, and
// decrypt with kms:Decrypt only the customer-managed key SecretsKmsKeyArn
// names, only when it names one, only through Secrets Manager. A function
// that names no secret may do neither.
func (c *checker) secretGrants(nameVars []string) {
	for _, id := range slices.Sorted(maps.Keys(asMap(c.tmpl["Resources"]))) {
		if asMap(asMap(c.tmpl["Resources"])[id])["Type"] != "AWS::Serverless::Function" {
			continue
		}
		vars := asMap(asMap(c.props(id)["Environment"])["Variables"])
		named := map[string]bool{} // the parameters holding the names
		for _, v := range nameVars {
			if ref, ok := asMap(vars[v])["Ref"].(string); ok {
				named[ref] = true
			} else if vars[v] != nil {
				c.fail("%s %s is %s, want a Ref to the parameter holding the secret's name", id, v, show(vars[v]))
			}
		}
		granted := map[string]bool{}
		for _, st := range c.statements(id) {
			c.grant(id, st, named, granted)
		}
		if !maps.Equal(granted, named) {
			c.fail("%s may read the secrets named by %v, want exactly those its environment names: %v", id,
				slices.Sorted(maps.Keys(granted)), slices.Sorted(maps.Keys(named)))
		}
	}
}

// grant checks one policy statement of function id and adds to granted
// the parameters naming the secrets it grants.
func (c *checker) grant(id string, st any, named, granted map[string]bool) {
	cond, st := unwrapIf(st)
	var actions []string
	for _, a := range append(asList(asMap(st)["Action"]), asMap(st)["Action"]) {
		if s, ok := a.(string); ok {
			actions = append(actions, s)
		}
	}
	secretsAction := slices.ContainsFunc(actions, func(a string) bool {
		return strings.HasPrefix(a, "secretsmanager:") || strings.HasPrefix(a, "kms:") || a == "*"
	})
	switch {
	case !secretsAction:
		return
	case len(named) == 0:
		c.fail("%s reads no secret, and its policy allows %v", id, actions)
	case slices.Equal(actions, []string{"secretsmanager:GetSecretValue"}):
		const arn = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${%s}-??????"
		if asMap(st)["NotResource"] != nil || cond != "" {
			c.fail("%s's secretsmanager:GetSecretValue statement %s is conditional or names NotResource", id, show(st))
		}
		for _, r := range append(asList(asMap(st)["Resource"]), asMap(st)["Resource"]) {
			if r == nil || asList(r) != nil {
				continue
			}
			when, r := unwrapIf(r)
			sub, _ := asMap(r)["Fn::Sub"].(string)
			refs := subRefs(sub)
			if len(refs) == 0 || !named[refs[len(refs)-1]] || sub != fmt.Sprintf(arn, refs[len(refs)-1]) {
				c.fail("%s may read the secret %s, not one its environment names", id, show(r))
				continue
			}
			param := refs[len(refs)-1]
			granted[param] = true
			// A name that may be empty is granted only when it is not.
			set := map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": param}, ""}}}}
			optional := asMap(asMap(c.tmpl["Parameters"])[param])["Default"] == ""
			if optional != (when != "") || when != "" && !reflect.DeepEqual(asMap(c.tmpl["Conditions"])[when], set) {
				c.fail("%s may read the secret %s under the condition %q: want it granted if and only if %s is set", id, param, when, param)
			}
		}
	case slices.Equal(actions, []string{"kms:Decrypt"}):
		via := asMap(asMap(asMap(st)["Condition"])["StringEquals"])["kms:ViaService"]
		if cond != "HasSecretsKmsKey" || !reflect.DeepEqual(asMap(st)["Resource"], map[string]any{"Ref": "SecretsKmsKeyArn"}) || via == nil {
			c.fail("%s's kms:Decrypt statement %s (under %q): want SecretsKmsKeyArn, only if HasSecretsKmsKey, through Secrets Manager (kms:ViaService)", id, show(st), cond)
		}
	default:
		c.fail("%s's policy allows %v: want secretsmanager:GetSecretValue or kms:Decrypt alone", id, actions)
	}
}

// unwrapIf returns the condition and the value of Fn::If [cond, value,
// AWS::NoValue], or "" and v itself.
func unwrapIf(v any) (string, any) {
	args := asList(asMap(v)["Fn::If"])
	if len(args) == 3 && reflect.DeepEqual(args[2], map[string]any{"Ref": "AWS::NoValue"}) {
		cond, _ := args[0].(string)
		return cond, args[1]
	}
	return "", v
}
