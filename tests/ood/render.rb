# What Open OnDemand does with a batch-connect app before and after it submits it, for the tests
# (Open OnDemand itself cannot be installed here):
#
#   ruby render.rb submit APP_DIR STAGED_DIR VALUES_JSON
#     renders submit.yml.erb with the form's values, stages template/ into STAGED_DIR with every
#     .erb rendered (the extension dropped, file modes kept), builds the job script with ood_core's
#     own "basic" template (lib/, unchanged) and prints {"script": path, "native": [sbatch args],
#     "shell_path": the interpreter Open OnDemand's Slurm adapter writes as the script's #! line}
#   ruby render.rb view APP_DIR CONNECTION_YML
#     renders view.html.erb with the connection values the job wrote (host, port, password, ...)
require "erb"
require "fileutils"
require "json"
require "ostruct"
require "yaml"
$LOAD_PATH.unshift File.join(__dir__, "lib")
require "ood_core/refinements/hash_extensions"
require "ood_core/refinements/array_extensions"
require "ood_core/batch_connect/template"
require "ood_core/batch_connect/templates/basic"

# The form's values as Open OnDemand's templates see them: each a method, and all as `context`.
class Values
  def initialize(values)
    @values = values
    values.each { |name, value| define_singleton_method(name) { value } }
  end

  def context
    OpenStruct.new(@values)
  end

  def render(path)
    ERB.new(File.read(path), trim_mode: "-").result(binding)
  end
end

mode, app, *rest = ARGV
case mode
when "submit"
  staged, values_file = rest
  values = Values.new(JSON.parse(File.read(values_file)))
  submit = YAML.safe_load(values.render(File.join(app, "submit.yml.erb")))
  FileUtils.mkdir_p(staged)
  FileUtils.cp_r(File.join(app, "template", "."), staged, preserve: true)
  Dir.glob(File.join(staged, "**", "*.erb")).each do |path|
    File.write(path.delete_suffix(".erb"), values.render(path))
    File.chmod(File.stat(path).mode, path.delete_suffix(".erb"))
    File.delete(path)
  end
  connect = (submit["batch_connect"] || {}).merge("work_dir" => staged)
  script = File.join(staged, "job_script_content.sh")
  File.write(script, OodCore::BatchConnect::Factory.build_basic(connect).to_s)
  puts JSON.dump({"script" => script, "native" => submit.dig("script", "native") || [],
                  "shell_path" => submit.dig("script", "shell_path")})
when "view"
  puts Values.new(YAML.safe_load(File.read(rest[0]))).render(File.join(app, "view.html.erb"))
else
  abort "usage: render.rb submit APP STAGED VALUES_JSON | view APP CONNECTION_YML"
end
