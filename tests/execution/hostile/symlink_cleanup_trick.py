"""EXPECT: invalid_submission -- plant links to host folders so the driver's cleanup deletes them."""
import os
os.symlink("__OUTSIDE_DIR__", "victim_dir")
os.symlink("__OUTSIDE_DIR__/canary.txt", "victim_file")
os.symlink("/", "root_link")
os.mkdir("sub")
os.symlink("__OUTSIDE_DIR__", "sub/deeper")
try:
    os.link("input/test.csv", "hardlink.csv")
    print("WROTE hardlink")
except OSError as e:
    print("blocked hardlink", e)
