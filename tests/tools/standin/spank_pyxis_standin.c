/*
 * Stand-in for NVIDIA pyxis's spank_pyxis.so (ParallelCluster AMIs: pyxis 0.20 at
 * /usr/local/lib/slurm/spank_pyxis.so), for the stand-in node: a SPANK plugin that registers
 * pyxis's --container-image option and does nothing with it. Loaded only if plugstack.conf
 * names it, as the real one; with it, `srun --help` lists the option and a `required` entry
 * that fails to load fails the job, as on the node.
 * The declarations follow slurm/spank.h (struct spank_option; spank_option_register), which
 * the stand-in's Debian image does not install; plugin_version is Slurm's version number,
 * given at build time, which the plugin loader checks.
 */
struct spank_option {
	char *name;
	char *arginfo;
	char *usage;
	int has_arg;
	int val;
	int (*cb)(int val, const char *optarg, int remote);
};
extern int spank_option_register(void *spank, struct spank_option *opt);

const char plugin_name[] = "pyxis";
const char plugin_type[] = "spank";
const unsigned int plugin_version = SLURM_VERSION_NUMBER;

static int accept_image(int val, const char *optarg, int remote)
{
	(void)val; (void)optarg; (void)remote;
	return 0;
}

static struct spank_option container_image = {
	"container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
	"[pyxis stand-in] the image to run the job's tasks in", 1, 0, accept_image,
};

int slurm_spank_init(void *spank, int argc, char **argv)
{
	(void)argc; (void)argv;
	return spank_option_register(spank, &container_image);
}
