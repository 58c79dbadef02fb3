package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/chargeonce/chargeonce/internal/audit"
	"github.com/chargeonce/chargeonce/internal/charge"
	"github.com/chargeonce/chargeonce/internal/intake"
	"github.com/chargeonce/chargeonce/internal/limit"
	"github.com/chargeonce/chargeonce/internal/queue"
	"github.com/chargeonce/chargeonce/internal/regions"
	"github.com/chargeonce/chargeonce/internal/secrets"
	"github.com/chargeonce/chargeonce/internal/testkit"
	"github.com/chargeonce/chargeonce/pkg/idem/dynamostore"
)

// requests are the SDK values whose construction uses each action: a
// request's input, or a transaction's item, which IAM authorizes as its
// item action.
var requests = map[string][]reflect.Type{
	"dynamodb:GetItem":              {reflect.TypeFor[dynamodb.GetItemInput]()},
	"dynamodb:PutItem":              {reflect.TypeFor[dynamodb.PutItemInput](), reflect.TypeFor[ddbtypes.Put]()},
	"dynamodb:UpdateItem":           {reflect.TypeFor[dynamodb.UpdateItemInput](), reflect.TypeFor[ddbtypes.Update]()},
	"dynamodb:DeleteItem":           {reflect.TypeFor[dynamodb.DeleteItemInput](), reflect.TypeFor[ddbtypes.Delete]()},
	"dynamodb:ConditionCheckItem":   {reflect.TypeFor[ddbtypes.ConditionCheck]()},
	"dynamodb:Query":                {reflect.TypeFor[dynamodb.QueryInput]()},
	"dynamodb:Scan":                 {reflect.TypeFor[dynamodb.ScanInput]()},
	"sqs:SendMessage":               {reflect.TypeFor[sqs.SendMessageInput](), reflect.TypeFor[sqs.SendMessageBatchInput]()},
	"s3:PutObject":                  {reflect.TypeFor[s3.PutObjectInput]()},
	"secretsmanager:GetSecretValue": {reflect.TypeFor[secretsmanager.GetSecretValueInput]()},
	// Secrets Manager decrypts a secret with the caller's rights.
	"kms:Decrypt": {reflect.TypeFor[secretsmanager.GetSecretValueInput]()},
}

// owners are the packages that call AWS on each resource, by its logical
// id, or by the parameter that names it (a secret, the KMS key).
var owners = map[string]reflect.Type{
	idempotencyTable:          reflect.TypeFor[dynamostore.Store](),
	chargesTable:              reflect.TypeFor[charge.Rows](),
	"GlobalIdempotencyTable":  reflect.TypeFor[dynamostore.Store](),
	"GlobalChargesTable":      reflect.TypeFor[charge.Rows](),
	"RoutesTableName":         reflect.TypeFor[regions.Routes](),
	"LedgerTableName":         reflect.TypeFor[dynamostore.Ledger](),
	limitsTable:               reflect.TypeFor[limit.Table](),
	reconcileQueue:            reflect.TypeFor[queue.Sender](),
	intakeDLQ:                 reflect.TypeFor[intake.Queue](),
	auditBucket:               reflect.TypeFor[audit.Archive](),
	auditIndex:                reflect.TypeFor[audit.Index](),
	"ProviderSecretName":      reflect.TypeFor[secrets.Secret](),
	"StripeWebhookSecretName": reflect.TypeFor[secrets.Secret](),
	"SecretsKmsKeyArn":        reflect.TypeFor[secrets.Secret](),
}

// The actions Lambda itself takes with a function's role: writing its
// output to its log group, its traces (Tracing: Active), polling the
// queue of its SQS event source, reading the stream of its DynamoDB event
// source (listing streams takes no resource), and sending what that event
// source discards to its destination.
var (
	logActions     = []string{"logs:CreateLogStream", "logs:PutLogEvents"}
	tracingActions = []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
	pollActions    = []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
	streamActions  = []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}
	listStreams    = "dynamodb:ListStreams"
	discardAction  = "sqs:SendMessage"
)

// built is what each function's code constructs: by its CodeUri, by
// package path, the types ("path.Name") whose values the code reached from
// its main builds in that package.
type built map[string]map[string]map[string]bool

// roles checks that each function runs as a role of its own, which Lambda
// alone may assume, with inline policies only, and logs to a log group of
// its own, which keeps lines LogRetentionDays.
func (c *checker) roles() {
	params := asMap(c.tmpl["Parameters"])
	c.equal("LogRetentionDays Default", fmt.Sprint(asMap(params["LogRetentionDays"])["Default"]), "90")
	used := map[string]string{} // the roles and log groups seen, and whose
	for _, id := range c.functions() {
		fn := c.resource(id)
		p := c.props(id)
		if p["Policies"] != nil {
			c.fail("%s has Policies: SAM ignores them beside a Role", id)
		}
		role := c.roleOf(id)
		if r := asMap(asMap(c.tmpl["Resources"])[role]); r["Type"] != "AWS::IAM::Role" {
			c.fail("%s's Role is %s, want the Arn of an AWS::IAM::Role of its own", id, show(p["Role"]))
			continue
		}
		if other, ok := used[role]; ok {
			c.fail("%s and %s share the role %s", other, id, role)
		}
		used[role] = id
		rp := c.props(role)
		c.equal(role+" Condition", c.resource(role)["Condition"], fn["Condition"])
		c.equal(role+" AssumeRolePolicyDocument", rp["AssumeRolePolicyDocument"], map[string]any{
			"Version": "2012-10-17",
			"Statement": []any{map[string]any{
				"Effect": "Allow", "Principal": map[string]any{"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole",
			}},
		})
		for name := range rp {
			if name != "AssumeRolePolicyDocument" && name != "Policies" {
				c.fail("%s sets %s: the check reads inline policies only", role, name)
			}
		}
		group := fmt.Sprint(asMap(asMap(p["LoggingConfig"])["LogGroup"])["Ref"])
		if asMap(asMap(c.tmpl["Resources"])[group])["Type"] != "AWS::Logs::LogGroup" {
			c.fail("%s's LoggingConfig.LogGroup is %s, want a Ref to an AWS::Logs::LogGroup of its own", id, show(p["LoggingConfig"]))
			continue
		}
		if other, ok := used[group]; ok {
			c.fail("%s and %s share the log group %s", other, id, group)
		}
		used[group] = id
		c.equal(group+" Condition", c.resource(group)["Condition"], fn["Condition"])
		c.equal(group+" RetentionInDays", c.props(group)["RetentionInDays"], map[string]any{"Ref": "LogRetentionDays"})
	}
}

// functions are the template's functions' logical ids, sorted.
func (c *checker) functions() []string {
	var ids []string
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] == "AWS::Serverless::Function" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// roleOf is the logical id of the role function id's Role names, if it
// is a GetAtt.
func (c *checker) roleOf(id string) string {
	att := asList(asMap(c.props(id)["Role"])["Fn::GetAtt"])
	if len(att) != 2 || att[1] != "Arn" {
		return ""
	}
	return fmt.Sprint(att[0])
}

// statements are the statements of the inline policies of function id's
// role.
func (c *checker) statements(id string) []any {
	role := c.roleOf(id)
	if role == "" {
		return nil // roles says so
	}
	var out []any
	for _, pol := range asList(c.props(role)["Policies"]) {
		out = append(out, asList(asMap(asMap(pol)["PolicyDocument"])["Statement"])...)
	}
	return out
}

// grants checks that every action a function's role allows has a use on
// each of its resources. The function's code, reached from its main, builds
// a request that takes the action, in the package that calls AWS on that
// resource (owners). Or Lambda takes it for the function: on its log group,
// for its tracing, or polling the queue of its SQS event.
func (c *checker) grants(code built) {
	tracing := asMap(asMap(c.tmpl["Globals"])["Function"])["Tracing"] == "Active"
	for _, id := range c.functions() {
		p := c.props(id)
		dir := fmt.Sprint(p["CodeUri"])
		reached, ok := code[dir]
		if !ok {
			c.fail("%s's CodeUri %s is no main package of the module", id, dir)
			continue
		}
		// What its event sources read, by the Resource names resources
		// gives: queues, streams ("Table.StreamArn"), and the queues
		// streams' discarded changes go to.
		polled, streamed, discards := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, e := range asMap(p["Events"]) {
			ep := asMap(asMap(e)["Properties"])
			switch asMap(e)["Type"] {
			case "SQS":
				polled[fmt.Sprint(asList(asMap(ep["Queue"])["Fn::GetAtt"])[0])] = true
			case "DynamoDB":
				for _, s := range resources(ep["Stream"]) {
					streamed[s] = true
				}
				discards[fmt.Sprint(asList(asMap(asMap(asMap(ep["DestinationConfig"])["OnFailure"])["Destination"])["Fn::GetAtt"])[0])] = true
			}
		}
		group := fmt.Sprint(asMap(asMap(p["LoggingConfig"])["LogGroup"])["Ref"])
		for _, st := range c.statements(id) {
			_, st := unwrapIf(st)
			s := asMap(st)
			if s["Effect"] != "Allow" || s["NotAction"] != nil || s["NotResource"] != nil {
				c.fail("%s's statement %s: want Effect Allow, Action and Resource", id, show(st))
				continue
			}
			for _, action := range strs(s["Action"]) {
				for _, res := range resources(s["Resource"]) {
					var used bool
					switch {
					case slices.Contains(logActions, action):
						used = res == group
					case slices.Contains(tracingActions, action):
						used = res == "*" && tracing
					case slices.Contains(pollActions, action):
						used = polled[res]
					case slices.Contains(streamActions, action):
						used = streamed[res]
					case action == listStreams:
						used = res == "*" && len(streamed) > 0
					case action == discardAction && discards[res]:
						used = true
					default:
						used = builds(reached, action, res)
					}
					if !used {
						c.fail("%s may %s on %s, and neither its code (%s) nor Lambda for it does", id, action, res, dir)
					}
				}
			}
		}
	}
}

// builds reports whether reached holds a request taking action, built in
// the package that calls AWS on res.
func builds(reached map[string]map[string]bool, action, res string) bool {
	owner, ok := owners[res]
	if !ok {
		return false
	}
	return slices.ContainsFunc(requests[action], func(t reflect.Type) bool { return reached[owner.PkgPath()][typeKey(t)] })
}

func typeKey(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

// without is b less what dir's code builds of typ in owner's package, or,
// with a nil owner, less dir.
func without(b built, dir string, owner, typ reflect.Type) built {
	out := maps.Clone(b)
	if owner == nil {
		delete(out, dir)
		return out
	}
	out[dir] = maps.Clone(out[dir])
	out[dir][owner.PkgPath()] = maps.Clone(out[dir][owner.PkgPath()])
	delete(out[dir][owner.PkgPath()], typeKey(typ))
	return out
}

// strs is a statement's Action, one or a list.
func strs(v any) []string {
	var out []string
	for _, a := range append(asList(v), v) {
		if s, ok := a.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// resources names what a statement's Resource (one or a list) is: a
// resource's logical id ("Table.StreamArn" for a table's stream), a
// parameter naming it ("GlobalTable.StreamArn" for its replica's stream),
// or "*". A Fn::If of two resources (a table of the stack's own, or one a
// parameter names) is both.
func resources(v any) []string {
	list := asList(v)
	if list == nil {
		list = []any{v}
	}
	var out []string
	for _, r := range list {
		_, r = unwrapIf(r)
		m := asMap(r)
		switch att := asList(m["Fn::GetAtt"]); {
		case len(asList(m["Fn::If"])) == 3:
			branches := asList(m["Fn::If"])
			out = append(out, resources(branches[1])...)
			out = append(out, resources(branches[2])...)
		case len(att) == 2 && att[1] == "StreamArn":
			out = append(out, fmt.Sprint(att[0], ".", att[1]))
		case m["Fn::GetAtt"] != nil:
			out = append(out, fmt.Sprint(att[0]))
		case m["Ref"] != nil:
			out = append(out, fmt.Sprint(m["Ref"]))
		case m["Fn::Sub"] != nil && strings.Contains(fmt.Sprint(m["Fn::Sub"]), "/stream/"):
			refs := subRefs(fmt.Sprint(m["Fn::Sub"]))
			out = append(out, refs[len(refs)-2]+".StreamArn") // the table's name, then the stream's label
		case m["Fn::Sub"] != nil:
			refs := subRefs(fmt.Sprint(m["Fn::Sub"]))
			out = append(out, strings.TrimSuffix(refs[len(refs)-1], ".Arn"))
		default:
			out = append(out, fmt.Sprint(r))
		}
	}
	return out
}

// queuePolicy checks that the charge-requests queue's policy denies
// sqs:SendMessage to every principal but the producers
// ChargeRequestProducers names (all of them when it names none), and
// allows nothing.
func (c *checker) queuePolicy() {
	var found []string
	for id, r := range asMap(c.tmpl["Resources"]) {
		if asMap(r)["Type"] == "AWS::SQS::QueuePolicy" && slices.ContainsFunc(asList(c.props(id)["Queues"]), func(q any) bool {
			return reflect.DeepEqual(q, map[string]any{"Ref": intakeQueue})
		}) {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		c.fail("%d queue policies name %s, want 1", len(found), intakeQueue)
		return
	}
	noValue := map[string]any{"Ref": "AWS::NoValue"}
	c.equal(found[0]+" PolicyDocument", c.props(found[0])["PolicyDocument"], map[string]any{
		"Version": "2012-10-17",
		"Statement": []any{map[string]any{
			"Sid": "NamedProducersOnly", "Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage",
			"Resource": getAtt(intakeQueue, "Arn"),
			"Condition": map[string]any{"Fn::If": []any{"HasChargeRequestProducers",
				map[string]any{"ArnNotEquals": map[string]any{"aws:PrincipalArn": map[string]any{"Ref": "ChargeRequestProducers"}}}, noValue}},
		}},
	})
	c.equal("Conditions HasChargeRequestProducers", asMap(c.tmpl["Conditions"])["HasChargeRequestProducers"],
		map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{
			map[string]any{"Fn::Join": []any{"", map[string]any{"Ref": "ChargeRequestProducers"}}}, ""}}}})
	c.equal("ChargeRequestProducers Default", asMap(asMap(c.tmpl["Parameters"])["ChargeRequestProducers"])["Default"], "")
}

// reachedCode is built once: parsing and type-checking the module takes
// about a second.
var reachedCode = sync.OnceValues(reach)

// listed is what `go list -json` says of a package.
type listed struct {
	ImportPath, Name, Dir, Export string
	GoFiles, Deps                 []string
}

const modulePath = "github.com/chargeonce/chargeonce"

// reach lists the module's functions (functions/*) with `go list`, and
// type-checks the module's packages they build with. It follows what each
// function's main refers to, and what an interface method it calls may
// dispatch to, and returns what the code so reached builds.
func reach() (built, error) {
	cmd := exec.Command("go", "list", "-deps", "-export", "-json=ImportPath,Name,Dir,Export,GoFiles,Deps", "./functions/...")
	cmd.Dir = testkit.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	var pkgs []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	exports := map[string]string{}
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	g := &graph{refs: map[string]map[string]bool{}, built: map[string]map[string]bool{}, pkgOf: map[string]string{}, methods: map[string][]method{}, calls: map[string][]call{}}
	for _, p := range pkgs {
		if strings.HasPrefix(p.ImportPath, modulePath+"/") {
			if err := g.add(fset, imp, p); err != nil {
				return nil, err
			}
		}
	}
	code := built{}
	for _, p := range pkgs {
		if dir, ok := strings.CutPrefix(p.ImportPath, modulePath+"/"); ok && p.Name == "main" {
			deps := map[string]bool{p.ImportPath: true}
			for _, d := range p.Deps {
				deps[d] = strings.HasPrefix(d, modulePath+"/")
			}
			code[dir] = g.reach(p.ImportPath+".main", deps)
		}
	}
	return code, nil
}

// graph is what the module's functions refer to and build, by function
// key (funcKey); a package's initializers are its "path.init".
type graph struct {
	refs  map[string]map[string]bool
	calls map[string][]call // the interface methods each calls
	built map[string]map[string]bool
	pkgOf map[string]string
	// methods are the module's concrete methods, by name.
	methods map[string][]method
}

// call is a call of the interface method name, of an interface with the
// methods set.
type call struct {
	name string
	set  []string
}

// method is a concrete method, with the method set of its type.
type method struct {
	key, pkg string
	names    map[string]bool
}

func (g *graph) add(fset *token.FileSet, imp types.Importer, p listed) error {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}}
	pkg, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info)
	if err != nil {
		return fmt.Errorf("type-check %s: %w", p.ImportPath, err)
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			key := p.ImportPath + ".init"
			if fd, ok := decl.(*ast.FuncDecl); ok && (fd.Recv != nil || fd.Name.Name != "init") {
				key = funcKey(info.Defs[fd.Name].(*types.Func))
			}
			g.walk(key, p.ImportPath, decl, info)
		}
	}
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok || types.IsInterface(tn.Type()) {
			continue
		}
		ms := types.NewMethodSet(types.NewPointer(tn.Type()))
		names := map[string]bool{}
		for sel := range ms.Methods() {
			names[sel.Obj().Name()] = true
		}
		for sel := range ms.Methods() {
			fn := sel.Obj().(*types.Func)
			if recv := fn.Signature().Recv(); recv != nil && !types.IsInterface(recv.Type()) {
				g.methods[fn.Name()] = append(g.methods[fn.Name()], method{key: funcKey(fn), pkg: fn.Pkg().Path(), names: names})
			}
		}
	}
	return nil
}

// walk records what node, part of the function key, refers to and builds.
func (g *graph) walk(key, pkg string, node ast.Node, info *types.Info) {
	g.pkgOf[key] = pkg
	if g.refs[key] == nil {
		g.refs[key], g.built[key] = map[string]bool{}, map[string]bool{}
	}
	ast.Inspect(node, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			fn, ok := info.Uses[n].(*types.Func)
			if !ok {
				break
			}
			fn = fn.Origin()
			if recv := fn.Signature().Recv(); recv != nil && types.IsInterface(recv.Type()) {
				iface, _ := recv.Type().Underlying().(*types.Interface)
				var set []string
				for m := range iface.Methods() {
					set = append(set, m.Name())
				}
				g.calls[key] = append(g.calls[key], call{fn.Name(), set})
			} else if fn.Pkg() != nil {
				g.refs[key][funcKey(fn)] = true
			}
		case *ast.CompositeLit:
			if named, ok := types.Unalias(info.TypeOf(n)).(*types.Named); ok && named.Obj().Pkg() != nil {
				g.built[key][named.Obj().Pkg().Path()+"."+named.Obj().Name()] = true
			}
		}
		return true
	})
}

// reach returns what the code reached from root, and from the
// initializers of the packages deps holds, builds, by package. A call of
// an interface method reaches every method of that name of the module's
// types in deps that have all the interface's methods.
func (g *graph) reach(root string, deps map[string]bool) map[string]map[string]bool {
	queue := []string{root}
	for _, d := range slices.Sorted(maps.Keys(deps)) {
		if deps[d] {
			queue = append(queue, d+".init")
		}
	}
	seen := map[string]bool{}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		if seen[k] {
			continue
		}
		seen[k] = true
		queue = append(queue, slices.Collect(maps.Keys(g.refs[k]))...)
		for _, c := range g.calls[k] {
			for _, m := range g.methods[c.name] {
				if deps[m.pkg] && !slices.ContainsFunc(c.set, func(n string) bool { return !m.names[n] }) {
					queue = append(queue, m.key)
				}
			}
		}
	}
	out := map[string]map[string]bool{}
	for k := range seen {
		pkg, ok := g.pkgOf[k]
		if !ok {
			continue
		}
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		maps.Copy(out[pkg], g.built[k])
	}
	return out
}

// funcKey names a function or a concrete method: "path.Func" or
// "path.Type.Method".
func funcKey(fn *types.Func) string {
	name := fn.Name()
	if recv := fn.Signature().Recv(); recv != nil {
		t := recv.Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := types.Unalias(t).(*types.Named); ok {
			name = n.Origin().Obj().Name() + "." + name
		}
	}
	return fn.Pkg().Path() + "." + name
}
