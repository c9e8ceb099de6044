// The pattern editor on the offscreen platform: typing a pattern finds its
// matches in a real model, errors point at their position, and registered
// patterns land in the user pattern file that loading reads.
#include <QAbstractItemModelTester>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "backends/backend_list.h"
#include "core/patterns/backend_spec.h"
#include "core/patterns/candidate.h"
#include "core/onnx/onnx_import.h"
#include "views/pattern_editor.h"
#include "views/user_pattern_model.h"

#include "tests/gui/gui_test_support.h"

using namespace collage;
using gui_test::model;

namespace {

// Conv -> Relu pairs that Relu(Conv(*, const, ?const)) must find, counted
// straight from the graph: a Relu of one input fed by a Conv whose weight is
// constant, whose bias is absent or constant, and whose output goes to that
// Relu alone (the match has one exit).
int countConvRelu(const Graph& g) {
  int count = 0;
  for (NodeId r = 0; r < g.numNodes(); ++r) {
    const Node& relu = g.node(r);
    if (relu.op != "Relu" || relu.inputs.size() != 1 || relu.inputs[0] == kNoValue) continue;
    const Value& x = g.value(relu.inputs[0]);
    if (x.producer == kNoNode) continue;
    const Node& conv = g.node(x.producer);
    if (conv.op != "Conv") continue;
    std::vector<ValueId> in = conv.inputs;
    while (!in.empty() && in.back() == kNoValue) in.pop_back();
    if (in.size() < 2 || in.size() > 3) continue;
    if (in[1] == kNoValue || !g.value(in[1]).isConstant()) continue;
    if (in.size() == 3 && !g.value(in[2]).isConstant()) continue;
    bool onlyRelu = true;
    for (ValueId out : conv.outputs) {
      if (out == kNoValue) continue;
      const Value& v = g.value(out);
      if (v.isGraphOutput) onlyRelu = false;
      for (NodeId c : v.consumers) onlyRelu = onlyRelu && c == r;
    }
    if (onlyRelu) ++count;
  }
  return count;
}

void typeInto(PatternEditor& editor, const QString& text) {
  auto* edit = editor.findChild<QPlainTextEdit*>(QStringLiteral("pattern"));
  QVERIFY(edit);
  edit->clear();
  QTest::keyClicks(edit, text);
}

}  // namespace

class PatternEditorTests : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QCoreApplication::setOrganizationName("CollageTests");
    QCoreApplication::setApplicationName("pattern_editor_tests");
    // Never read or write the real user's pattern file.
    qputenv("XDG_CONFIG_HOME", dir_.filePath("xdg").toUtf8());
    resnet_ = std::make_shared<const Graph>(importOnnx(model("resnet50_small").toStdString()));
    std::vector<std::string> errors;
    // A user file that does not exist: built-in specs only.
    specs_ = loadAllSpecs(&errors, dir_.filePath("none.toml").toStdString());
    QVERIFY2(errors.empty(), errors.empty() ? "" : errors.front().c_str());
    QVERIFY(!specs_.empty());
  }

  void typedPatternFindsEveryConvRelu() {
    PatternEditor editor;
    editor.setUserPatternPath(dir_.filePath("typed.toml"));
    editor.setBackendSpecs(specs_);
    editor.setGraph(resnet_);
    const int expected = countConvRelu(*resnet_);
    QVERIFY(expected > 0);

    QSignalSpy changed(&editor, &PatternEditor::matchesChanged);
    typeInto(editor, QStringLiteral("Relu(Conv(*, const, ?const))"));
    QTRY_COMPARE_WITH_TIMEOUT(editor.matchCount(), expected, 10000);
    QVERIFY(editor.errorText().isEmpty());
    QVERIFY(editor.statusText().contains(QString::number(expected)));
    QVERIFY(!changed.isEmpty());
    auto last = changed.last().at(0).value<QVector<QVector<NodeId>>>();
    QCOMPARE(last.size(), expected);
    for (const QVector<NodeId>& m : last) {
      QCOMPARE(m.size(), 2);
      QCOMPARE(resnet_->node(m[0]).op, std::string("Conv"));
      QCOMPARE(resnet_->node(m[1]).op, std::string("Relu"));
    }

    // Clicking a match in the list hands its nodes to the window.
    auto* list = editor.findChild<QListWidget*>(QStringLiteral("matches"));
    QVERIFY(list);
    QCOMPARE(list->count(), expected);
    QSignalSpy activated(&editor, &PatternEditor::matchActivated);
    editor.show();
    QVERIFY(QTest::qWaitForWindowExposed(&editor));
    QRect rect = list->visualItemRect(list->item(1));
    QTest::mouseClick(list->viewport(), Qt::LeftButton, {}, rect.center());
    QVERIFY(!activated.isEmpty());
    QCOMPARE(activated.last().at(0).value<QVector<NodeId>>(), last[1]);

    // A graph without Convs: no matches, and the highlights are cleared.
    auto bert = std::make_shared<const Graph>(importOnnx(model("bert_small").toStdString()));
    editor.setGraph(bert);
    QTRY_COMPARE_WITH_TIMEOUT(editor.matchCount(), 0, 10000);
    QVERIFY(changed.last().at(0).value<QVector<QVector<NodeId>>>().isEmpty());
  }

  void matchingTimeIsReported() {
    // Not a pass condition: the numbers behind matching off the UI thread
    // (asked: under 20 ms on a ~1,000-node BERT). COLLAGE_PATTERN_TIMING_MODEL
    // names a bigger model than the committed ones.
    QString path = qEnvironmentVariable("COLLAGE_PATTERN_TIMING_MODEL", model("bert_small"));
    auto graph = std::make_shared<const Graph>(importOnnx(path.toStdString()));
    PatternEditor editor;
    editor.setUserPatternPath(dir_.filePath("timing.toml"));
    editor.setGraph(graph);
    const QStringList patterns = {
        QStringLiteral("Add(*, *)"),
        QStringLiteral("Add(MatMul(*, const), const)"),
        QStringLiteral("Mul(Mul(x=*, Add(Erf(Div($x, const)), const)), const)"),
        QStringLiteral("Add(Mul(Div(d=Sub(x=*, ReduceMean($x)), Sqrt(Add(ReduceMean(Pow($d, "
                       "const)), const))), const), const)"),
    };
    int total = 0;
    for (const QString& p : patterns) {
      editor.setPatternText(p);
      editor.reparseNow();
      QTRY_VERIFY_WITH_TIMEOUT(editor.matchCount() >= 0, 10000);
      qInfo("%d nodes, %s: %s", graph->numNodes(), qPrintable(p), qPrintable(editor.statusText()));
      total += editor.matchCount();
    }
    QVERIFY(total > 0);
  }

  void brokenPatternNamesItsPosition() {
    PatternEditor editor;
    editor.setUserPatternPath(dir_.filePath("broken.toml"));
    editor.setGraph(resnet_);
    typeInto(editor, QStringLiteral("Relu(Conv(*, const"));
    QTRY_VERIFY_WITH_TIMEOUT(!editor.errorText().isEmpty(), 5000);
    QVERIFY2(editor.errorText().startsWith(QStringLiteral("line 1, column ")),
             qPrintable(editor.errorText()));
    QCOMPARE(editor.matchCount(), -1);
    QVERIFY(editor.errorPosition() >= 0);
    auto* edit = editor.findChild<QPlainTextEdit*>(QStringLiteral("pattern"));
    QCOMPARE(edit->extraSelections().size(), 1);

    // An unknown op is found by validation, at the op's column.
    typeInto(editor, QStringLiteral("Relu(Convv(*, const))"));
    QTRY_VERIFY_WITH_TIMEOUT(editor.errorText().contains(QStringLiteral("Convv")), 5000);
    QVERIFY2(editor.errorText().startsWith(QStringLiteral("line 1, column 6:")),
             qPrintable(editor.errorText()));
    QCOMPARE(editor.errorPosition(), 5);
    QCOMPARE(edit->extraSelections().front().cursor.selectionStart(), 5);

    // A second line: the position counts lines.
    editor.setPatternText(QStringLiteral("Relu(\n  Conv(*, const]"));
    editor.reparseNow();
    QVERIFY2(editor.errorText().startsWith(QStringLiteral("line 2, column ")),
             qPrintable(editor.errorText()));

    // Fixing the text clears the error.
    editor.setPatternText(QStringLiteral("Relu(*)"));
    editor.reparseNow();
    QVERIFY(editor.errorText().isEmpty());
    QVERIFY(edit->extraSelections().isEmpty());
  }

  void registerDisableRemoveRoundTripThroughTheFile() {
    QTemporaryDir dir;
    const QString path = dir.filePath("config/user_patterns.toml");
    PatternEditor editor;
    editor.setUserPatternPath(path);
    QCOMPARE(editor.userPatternPath(), path);
    editor.setBackendSpecs(specs_, {QStringLiteral("native")});
    QVERIFY(editor.setCurrentBackend(QStringLiteral("onednn")));
    QAbstractItemModelTester tester(editor.userPatternModel(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy changed(&editor, &PatternEditor::patternsChanged);

    // Refusals: no name, a text that does not parse; nothing written.
    editor.setPatternText(QStringLiteral("Sigmoid(Conv(*, const, ?const))"));
    QVERIFY(!editor.registerPattern());
    QVERIFY(editor.errorText().contains(QStringLiteral("name")));
    editor.setPatternName(QStringLiteral("conv_sigmoid"));
    editor.setPatternText(QStringLiteral("Sigmoid(Conv(*, const, ?const)"));
    QVERIFY(!editor.registerPattern());
    QVERIFY2(editor.errorText().contains(QStringLiteral("line 1, column")),
             qPrintable(editor.errorText()));
    QVERIFY(!QFile::exists(path));
    QCOMPARE(changed.count(), 0);

    // Register through the button.
    editor.setPatternText(QStringLiteral("Sigmoid(Conv(*, const, ?const))"));
    auto* button = editor.findChild<QPushButton*>(QStringLiteral("register"));
    QVERIFY(button);
    button->click();
    QVERIFY2(editor.errorText().isEmpty(), qPrintable(editor.errorText()));
    QCOMPARE(changed.count(), 1);
    QVERIFY(QFile::exists(path));
    {
      UserPatternStore store(path.toStdString());
      store.load();
      QCOMPARE(store.patterns("onednn").size(), size_t{1});
      QCOMPARE(store.patterns("onednn").front().name, std::string("conv_sigmoid"));
      QCOMPARE(store.patterns("onednn").front().text,
               std::string("Sigmoid(Conv(*, const, ?const))"));
    }
    QCOMPARE(editor.userPatternModel()->rowCount(), 1);
    QCOMPARE(editor.userPatternModel()->row(0).backend, QStringLiteral("onednn"));

    // What loading reads from that file: the pattern is in the onednn spec.
    {
      std::vector<std::string> errors;
      std::vector<BackendSpec> specs = loadAllSpecs(&errors, path.toStdString());
      QVERIFY2(errors.empty(), errors.empty() ? "" : errors.front().c_str());
      const PatternEntry* entry = nullptr;
      for (const BackendSpec& s : specs)
        if (s.name == "onednn") entry = s.findPattern("conv_sigmoid");
      QVERIFY(entry);
      QVERIFY(entry->userDefined);
      QVERIFY(entry->enabled);
    }

    // The same name again for onednn is refused, a built-in name too.
    QVERIFY(!editor.registerPattern());
    QVERIFY2(editor.errorText().contains(QStringLiteral("already")), qPrintable(editor.errorText()));
    const BackendSpec* onednn = nullptr;
    for (const BackendSpec& s : specs_)
      if (s.name == "onednn") onednn = &s;
    QVERIFY(onednn && !onednn->patterns.empty());
    editor.setPatternName(QString::fromStdString(onednn->patterns.front().name));
    QVERIFY(!editor.registerPattern());
    QVERIFY2(editor.errorText().contains(QStringLiteral("built-in")), qPrintable(editor.errorText()));
    QCOMPARE(changed.count(), 1);

    // Disable with the button, then enable with the check box.
    auto* table = editor.findChild<QTableView*>(QStringLiteral("userPatterns"));
    QVERIFY(table);
    table->selectRow(0);
    auto* toggle = editor.findChild<QPushButton*>(QStringLiteral("toggle"));
    QCOMPARE(toggle->text(), QStringLiteral("Disable"));
    toggle->click();
    QCOMPARE(changed.count(), 2);
    QVERIFY(!editor.userPatternModel()->row(0).enabled);
    {
      UserPatternStore store(path.toStdString());
      store.load();
      QVERIFY(store.isDisabled("onednn", "conv_sigmoid"));
    }
    QModelIndex check = editor.userPatternModel()->index(0, UserPatternModel::Enabled);
    QVERIFY(editor.userPatternModel()->setData(check, Qt::Checked, Qt::CheckStateRole));
    QCOMPARE(changed.count(), 3);
    {
      UserPatternStore store(path.toStdString());
      store.load();
      QVERIFY(!store.isDisabled("onednn", "conv_sigmoid"));
    }

    // The built-in view lists onednn's spec patterns; unticking one disables it.
    auto* tree = editor.findChild<QTreeWidget*>(QStringLiteral("builtin"));
    QVERIFY(tree);
    QList<QTreeWidgetItem*> found = tree->findItems(
        QString::fromStdString(onednn->patterns.front().name), Qt::MatchExactly | Qt::MatchRecursive);
    QCOMPARE(found.size(), 1);
    found.front()->setCheckState(0, Qt::Unchecked);
    QCOMPARE(changed.count(), 4);
    {
      UserPatternStore store(path.toStdString());
      store.load();
      QVERIFY(store.isDisabled("onednn", onednn->patterns.front().name));
    }
    QVERIFY(editor.setPatternEnabled(QStringLiteral("onednn"),
                                     QString::fromStdString(onednn->patterns.front().name), true));
    QCOMPARE(changed.count(), 5);

    // Remove with the button: gone from the file and the list.
    table->selectRow(0);
    editor.findChild<QPushButton*>(QStringLiteral("remove"))->click();
    QCOMPARE(changed.count(), 6);
    QCOMPARE(editor.userPatternModel()->rowCount(), 0);
    {
      UserPatternStore store(path.toStdString());
      store.load();
      QVERIFY(store.patterns("onednn").empty());
      QVERIFY(!store.isDisabled("onednn", "conv_sigmoid"));
    }
    // Removing it again is refused.
    QVERIFY(!editor.removePattern(QStringLiteral("onednn"), QStringLiteral("conv_sigmoid")));
    QCOMPARE(changed.count(), 6);

    // Registered elsewhere (another editor, `collage spec`): reload sees it.
    {
      UserPatternStore store(path.toStdString());
      store.load();
      store.add("openblas", "gemm_relu", "Relu(Gemm(*, const, ?const))");
      store.save();
    }
    editor.reloadUserPatterns();
    QCOMPARE(editor.userPatternModel()->rowCount(), 1);
    QCOMPARE(editor.userPatternModel()->findRow(QStringLiteral("openblas"), QStringLiteral("gemm_relu")), 0);
  }

  void registeredPatternReachesEnumeration() {
    // What the window does after patternsChanged(): load the backends with the
    // editor's file and enumerate. native has no Conv patterns of its own, so
    // every Conv->Relu candidate labelled with the new name comes from it.
    QTemporaryDir dir;
    PatternEditor editor;
    editor.setUserPatternPath(dir.filePath("user_patterns.toml"));
    editor.setBackendSpecs(specs_);
    QVERIFY(editor.setCurrentBackend(QStringLiteral("native")));
    editor.setPatternName(QStringLiteral("my_conv_relu"));
    editor.setPatternText(QStringLiteral("Relu(Conv(*, const, ?const))"));
    QVERIFY2(editor.registerPattern(), qPrintable(editor.errorText()));

    auto countFromPattern = [&] {
      BackendSet set = loadBackendSet({"native"}, editor.userPatternPath().toStdString());
      EnumerationOptions options;
      options.requireFullCover = false;
      CandidateSet candidates = enumerateCandidates(*resnet_, set.capabilities(), options);
      int n = 0;
      for (const Candidate& c : candidates.all()) n += c.origin == "pattern:my_conv_relu" ? 1 : 0;
      return n;
    };
    QCOMPARE(countFromPattern(), countConvRelu(*resnet_));
    QVERIFY(editor.setPatternEnabled(QStringLiteral("native"), QStringLiteral("my_conv_relu"), false));
    QCOMPARE(countFromPattern(), 0);
  }

  void brokenUserFileIsNeverOverwritten() {
    QTemporaryDir dir;
    const QString path = dir.filePath("user_patterns.toml");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("[onednn.patterns]\nbad = \"Relu(\"\n");
    f.close();
    PatternEditor editor;
    editor.setUserPatternPath(path);
    editor.setBackendSpecs(specs_);
    QVERIFY(!editor.errorText().isEmpty());
    editor.setPatternName(QStringLiteral("ok"));
    editor.setPatternText(QStringLiteral("Relu(*)"));
    QVERIFY(!editor.registerPattern());
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("[onednn.patterns]\nbad = \"Relu(\"\n"));
  }

 private:
  QTemporaryDir dir_;
  std::shared_ptr<const Graph> resnet_;
  std::vector<BackendSpec> specs_;
};

QTEST_MAIN(PatternEditorTests)
#include "pattern_editor_tests.moc"
